"""lab/clients/frameworks/releases.py: pip's answer parsed, cached for the day, ranges in PEP 440 order,
venvs built only where missing (no network: pip and the set-up script are stand-ins)."""
import datetime as dt
import subprocess
import threading
import time

import pytest

from lab.clients.frameworks import releases
from lab.errors import LabError

PIP_SAYS = """livekit-plugins-google (1.8.10)
Available versions: 1.8.10, 1.8.9, 1.8.8, 1.8.7, 1.8.0, 1.7.1, 0.9
"""


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_INDEX_CACHE", str(tmp_path / "index"))
    return tmp_path / "index"


def served(_package):
    return releases.parse_index(PIP_SAYS, _package)


def test_pip_is_asked_once_a_day_per_package(cache):
    asked = []

    def ask(pkg):
        asked.append(pkg)
        return PIP_SAYS
    day = dt.date(2026, 12, 1)
    for _ in range(3):
        assert releases.index_releases("livekit-plugins-google", ask=ask, today=day)[:2] == ["1.8.10", "1.8.9"]
    assert asked == ["livekit-plugins-google"]
    releases.index_releases("livekit-plugins-google", ask=ask, today=dt.date(2026, 12, 2))
    assert len(asked) == 2          # a new day, a fresh answer (the nightly's @latest)
    with pytest.raises(LabError, match="no 'Available versions' line"):
        releases.index_releases("pipecat-ai", ask=lambda p: "ERROR: nothing", today=day)


def test_a_range_is_inclusive_and_in_version_order():
    assert releases.sweep("livekit@1.8.8..1.8.10", served) == ["livekit@1.8.8", "livekit@1.8.9", "livekit@1.8.10"]
    assert releases.sweep("livekit@1.8.0..1.8.7", served) == ["livekit@1.8.0", "livekit@1.8.7"]
    assert releases.sweep("livekit@latest", served) == ["livekit@1.8.10"]
    assert releases.sweep("livekit@1.8.9", served) == ["livekit@1.8.9"]     # one release: no sweep
    assert releases.expand(["probe", "livekit@1.8.9..1.8.10", "livekit@latest"], served) == \
        ["probe", "livekit@1.8.9", "livekit@1.8.10"]
    assert releases.is_sweep("pipecat@latest") and not releases.is_sweep("pipecat@1.14.0")


@pytest.mark.parametrize("spec, says", [
    ("livekit@2.0..2.1", "serves no livekit-plugins-google release from 2.0 to 2.1"),
    ("livekit@1.8.9..1.8.0", "runs backwards"),
    ("zoom@latest", "no framework 'zoom'"),
])
def test_a_sweep_that_names_nothing_is_one_line(spec, says):
    with pytest.raises(LabError, match=says):
        releases.sweep(spec, served)


def test_only_missing_release_venvs_are_built_a_few_at_a_time():
    calls, now, most = [], [0], [0]
    lock = threading.Lock()

    def run(argv, **kw):
        with lock:
            calls.append(argv[-1])
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1
        return subprocess.CompletedProcess(argv, 0, stdout=f"peers-setup: {argv[-1]} installed\n", stderr="")
    lines = []
    # releases no venv exists for here, and the plain names, which stay `make peers-setup`'s
    wanted = ["probe", "livekit", "livekit@0.0.1", "livekit@0.0.2", "pipecat@0.0.3", "livekit@0.0.1"]
    releases.ensure_venvs(wanted, out=lines.append, run=run, at_once=2)
    assert sorted(calls) == ["livekit@0.0.1", "livekit@0.0.2", "pipecat@0.0.3"]
    assert most[0] == 2
    assert lines[0] == "== venvs: building 3 (livekit@0.0.1, livekit@0.0.2, pipecat@0.0.3), 2 at a time"


def test_a_venv_that_cannot_be_built_is_one_line():
    def no_index(argv, **kw):
        return subprocess.CompletedProcess(argv, 75, stdout="", stderr="peers-setup: no network\n")

    def no_release(argv, **kw):
        return subprocess.CompletedProcess(argv, 2, stdout="", stderr="peers-setup: livekit@0.0.1: pip install failed\n")
    with pytest.raises(LabError, match="no package index"):
        releases.ensure_venvs(["livekit@0.0.1"], out=lambda _l: None, run=no_index)
    with pytest.raises(LabError, match="pip install failed"):
        releases.ensure_venvs(["livekit@0.0.1"], out=lambda _l: None, run=no_release)
