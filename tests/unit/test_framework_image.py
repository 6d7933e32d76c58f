"""The framework client image's offline wheelhouse: pip's failures read as one line that says which
(no index, no such release), and a dependency with only a source archive is taken as a pure wheel."""
import subprocess

import pytest

from lab.errors import CapabilityError
from lab.topology import framework_image

REFUSED = ("WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError(\"HTTPConnection("
           "host='127.0.0.1', port=9): Failed to establish a new connection: [Errno 111] Connection refused\")': "
           "/simple/docopt/\nERROR: Could not find a version that satisfies the requirement docopt (from versions: "
           "none)\nERROR: No matching distribution found for docopt\n")
NO_WHEEL = ("ERROR: Could not find a version that satisfies the requirement docopt>=0.6.2 (from num2words) (from "
            "versions: none)\nERROR: No matching distribution found for docopt>=0.6.2\n")


def test_an_index_that_does_not_answer_is_said_as_such_not_as_a_missing_release():
    with pytest.raises(CapabilityError, match=r"cannot reach the package index for the pipecat wheelhouse .*"
                                              r"Connection refused"):
        framework_image._failure("pipecat", REFUSED)


def test_a_requirement_without_a_wheel_is_named_and_any_other_error_is_pips_last_line():
    assert framework_image._failure("pipecat", NO_WHEEL) == "docopt>=0.6.2"
    with pytest.raises(CapabilityError, match=r"cannot download the adk wheelhouse .*: ERROR: disk full$"):
        framework_image._failure("adk", "ERROR: first\nERROR: disk full\n")


def _fake_pip(tmp_path, monkeypatch, wheel_name: str, download_fails_first: bool = True):
    calls = []

    def pip(*args):
        calls.append(args[0])
        if args[0] == "download":
            ok = not download_fails_first or "wheel" in calls
            return subprocess.CompletedProcess(args, 0 if ok else 1, "", "" if ok else NO_WHEEL)
        (tmp_path / "pipecat" / wheel_name).write_text("")
        return subprocess.CompletedProcess(args, 0, "", "")
    monkeypatch.setattr(framework_image, "_pip", pip)
    monkeypatch.setattr(framework_image, "WHEELS", tmp_path)
    monkeypatch.setattr(framework_image, "pins", lambda name: ["pipecat-ai[google]==1.14.0"])
    return calls


def test_a_source_only_dependency_becomes_a_pure_wheel_and_the_wheelhouse_is_then_reused(tmp_path, monkeypatch):
    calls = _fake_pip(tmp_path, monkeypatch, "docopt-0.6.2-py2.py3-none-any.whl")
    assert framework_image.wheelhouse("pipecat", log=None) == tmp_path / "pipecat"
    assert calls == ["download", "wheel", "download"]
    framework_image.wheelhouse("pipecat", log=None)       # stamped: no pip at all
    assert calls == ["download", "wheel", "download"]


def test_a_source_only_dependency_that_builds_native_is_refused_and_not_kept(tmp_path, monkeypatch):
    _fake_pip(tmp_path, monkeypatch, "docopt-0.6.2-cp311-cp311-linux_x86_64.whl")
    with pytest.raises(CapabilityError, match=r"docopt>=0.6.2 has no wheel for the client image"):
        framework_image.wheelhouse("pipecat", log=None)
    assert not list((tmp_path / "pipecat").glob("*.whl")) and not (tmp_path / "pipecat" / ".pins").exists()


def test_two_that_want_the_wheelhouse_together_download_it_once(tmp_path, monkeypatch):
    # two test workers (or two runs) at once: the second waits for the first's download and finds
    # the folder stamped, rather than writing the same wheels beside it
    import threading
    import time

    downloads, inside = [], threading.Event()

    def pip(*args):
        downloads.append(args[0])
        inside.set()
        time.sleep(0.3)          # the first is still downloading when the second asks
        return subprocess.CompletedProcess(args, 0, "", "")
    monkeypatch.setattr(framework_image, "_pip", pip)
    monkeypatch.setattr(framework_image, "WHEELS", tmp_path)
    monkeypatch.setattr(framework_image, "pins", lambda name: ["google-adk==2.13.0"])
    first = threading.Thread(target=framework_image.wheelhouse, args=("adk",), kwargs={"log": None})
    first.start()
    inside.wait(5)
    assert framework_image.wheelhouse("adk", log=None) == tmp_path / "adk"
    first.join(5)
    assert downloads == ["download"]
