"""scripts/phase.sh: each CI phase timed, its exit status kept, a summary of the run's phases."""
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "phase.sh"


def phase(tmp_path, *argv):
    return subprocess.run(["bash", str(SCRIPT), *argv], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "PHASE_LOG": str(tmp_path / "phases.log")})


def test_a_phase_is_timed_and_its_status_kept(tmp_path):
    ok = phase(tmp_path, "venvs", "true")
    assert ok.returncode == 0 and ok.stdout.splitlines()[-1].startswith("== phase venvs: ")
    assert ok.stdout.splitlines()[-1].endswith(" s (exit 0)")
    skipped = phase(tmp_path, "venvs", "--ok", "75", "bash", "-c", "exit 75")
    assert skipped.returncode == 0 and "(exit 75)" in skipped.stdout
    bad = phase(tmp_path, "serial-test", "bash", "-c", "exit 3")
    assert bad.returncode == 3
    # a failing phase ends with the summary so far: where the time went before it failed
    assert "== phases:" in bad.stdout and "serial-test" in bad.stdout.split("== phases:")[1]


def test_the_summary_lists_every_phase_their_sum_and_the_wall_time(tmp_path):
    phase(tmp_path, "set-up", "true")
    phase(tmp_path, "parallel-tests", "sleep", "0.2")
    s = phase(tmp_path, "--summary").stdout.splitlines()
    assert s[0] == "== phases:"
    assert [l.split()[0] for l in s[1:]] == ["set-up", "parallel-tests", "sum", "wall"]
    assert float(s[-2].split()[1]) >= 0.2 and float(s[-1].split()[1]) >= 0.2


def test_phases_side_by_side_count_once_in_the_wall_time(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PHASE_LOG": str(tmp_path / "phases.log")}
    both = [subprocess.Popen(["bash", str(SCRIPT), name, "sleep", "1"], env=env, stdout=subprocess.DEVNULL)
            for name in ("images", "venvs")]
    assert [p.wait(timeout=30) for p in both] == [0, 0]
    rows = {l.split()[0]: float(l.split()[1]) for l in phase(tmp_path, "--summary").stdout.splitlines()[1:]}
    assert rows["sum"] >= 2.0
    # the two overlapped: the wall time is one phase's, not their sum
    assert 1.0 <= rows["wall"] < rows["sum"]
