"""The twin's hot rooms compiled with mypyc (lab.twin.compiled) against their .py files, the reference.

The build is made once per machine and sources (about a minute on two cores, cached under
~/.cache/livelab/mypyc); the core's own tests then run against it in a child process, and the
microphone lane's scripts (test_twin_quiet_chunk.py) play the same actions, times, records and logs
compiled as interpreted. The whole unit suite runs against it with `LAB_TWIN_COMPILED=1 pytest ...`.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lab.bench import twin as twin_bench
from lab.errors import LabError
from lab.twin import compiled

# the core's own tests, run against the build: the microphone lane, the fixed reply frames, the
# rooms' timers and ids, the conversation engine, the OpenAI rooms
CORE_TESTS = ("tests/unit/test_twin_quiet_chunk.py", "tests/unit/test_twin_mic_lane.py",
              "tests/unit/test_twin_fixed_frames.py", "tests/unit/test_twin_rooms.py",
              "tests/unit/test_twin_core.py", "tests/unit/test_openai_twin.py")
PLAY = ("from lab.twin import compiled; from tests.unit import test_twin_quiet_chunk as q; "
        "print(compiled.which()); print(repr([q.play(n) for n in q.SCRIPTS]))")


def _env(on: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != compiled.SWITCH}
    return {**env, compiled.SWITCH: "1"} if on else env


@pytest.fixture(scope="module")
def build():
    why = compiled.can_build()
    if why:
        pytest.skip(f"no compiled twin core can be built here: {why}")
    return compiled.build(log=lambda line: None)


@pytest.mark.slow
def test_the_cores_own_tests_pass_against_the_build(build):
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *CORE_TESTS],   # not -q: the header
                       cwd=compiled.ROOT, env=_env(True), capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert f"twin core: compiled ({build})" in out, out[:500]     # the report header: the build ran
    assert " passed" in out.splitlines()[-1]


@pytest.mark.slow
def test_the_build_plays_the_lanes_scripts_as_the_py_files_do(build):
    runs = {}
    for on in (True, False):
        r = subprocess.run([sys.executable, "-c", PLAY], cwd=compiled.ROOT, env=_env(on), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        which, played = r.stdout.split("\n", 1)
        assert which == ("compiled" if on else "interpreted")
        runs[on] = played
    assert len(runs[False]) > 1000 and runs[True] == runs[False]


def test_the_switch_without_a_build_is_one_line_and_a_failure(tmp_path):
    r = subprocess.run([sys.executable, "-c", "import lab"], cwd=compiled.ROOT,
                       env={**_env(True), "XDG_CACHE_HOME": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "compiled twin core is missing" in lines[0] and "lab twin compile" in lines[0], lines


def test_without_the_switch_the_py_files_run():
    r = subprocess.run([sys.executable, "-c", "import lab.twin.core as c; from lab.twin import compiled; "
                        "print(c.__file__.endswith('.py'), compiled.which())"],
                       cwd=compiled.ROOT, env=_env(False), capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["True", "interpreted"], r.stderr


def test_the_bench_refuses_compiled_without_a_build_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(LabError, match="--compiled: the compiled twin core is missing"):
        twin_bench.main(["--mode", "stream", "--sessions", "1", "--compiled"])


@pytest.mark.slow
def test_what_the_ears_worker_sends_back_unpickles_under_the_build(build):
    # the recognizer's worker process returns a hearing.Match, pickled (lab.twin.recognizer): a
    # compiled frozen dataclass could not be unpickled, so the twin heard nothing but a closed socket
    code = ("import pickle; from lab.twin import hearing as H, recognizer as R; "
            "m = H.Match(('Book it.',), 1.0, 'grammar', 'book it'); h = R.Heard('book it', None, 1.0); "
            "assert pickle.loads(pickle.dumps((h, m))) == (h, m); print('ok')")
    r = subprocess.run([sys.executable, "-c", code], cwd=compiled.ROOT, env=_env(True), capture_output=True,
                       text=True, timeout=60)
    assert r.stdout.strip() == "ok", r.stderr[-2000:]
