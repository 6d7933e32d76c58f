"""scripts/docker-setup.sh runs one at a time on a machine: test workers' fixtures and other checkouts
may call it together, and apt, dockerd and the base image are the machine's, not a checkout's.

The lock is taken before any step: while another holder has it, the script prints nothing and does
nothing (it is stopped here before it could start apt or dockerd). And the dockerd it starts, which
outlives it, does not hold the lock: run with stand-ins for docker and dockerd on PATH.
"""
import fcntl
import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "docker-setup.sh"


@pytest.mark.skipif(os.geteuid() != 0, reason="the script refuses to start without root, before its lock")
def test_a_second_set_up_waits_for_the_first_before_any_step(tmp_path):
    lock = tmp_path / "setup.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.run(["timeout", "2", "bash", str(SCRIPT)], capture_output=True, text=True,
                              env={**os.environ, "LIVELAB_SETUP_LOCK": str(lock)}, stdin=subprocess.DEVNULL)
    assert proc.returncode == 124, f"it did not wait for the lock: rc {proc.returncode}, {proc.stdout}{proc.stderr}"
    assert "docker-setup:" not in proc.stdout + proc.stderr, "a step ran while another set-up held the lock"


STAND_IN_DOCKERD = """#!/bin/bash
# a dockerd that says whether it was handed the set-up lock's descriptor, then lives on as one does
echo $$ > "$STAND_IN_PID"
if [ -e /proc/self/fd/9 ]; then echo open > "$STAND_IN_FD9"; else echo closed > "$STAND_IN_FD9"; fi
exec sleep 30
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the script refuses to start without root, before its lock")
def test_the_daemon_it_starts_does_not_keep_the_lock(tmp_path):
    # dockerd outlives the script: started with the lock's descriptor open, it would hold the lock
    # for as long as it runs, and every later set-up on the machine would wait forever. Stand-ins on
    # PATH: a docker whose `info` never answers (so the script starts its dockerd, waits a second and
    # gives up, before any other step) and a dockerd that records its descriptor 9 and sleeps on.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("dockerd", STAND_IN_DOCKERD), ("docker", "#!/bin/sh\nexit 1\n"),
                       ("mmdebstrap", "#!/bin/sh\nexit 0\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    lock, pid_file, fd9 = tmp_path / "setup.lock", tmp_path / "dockerd.pid", tmp_path / "fd9"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LIVELAB_SETUP_LOCK": str(lock),
           "LIVELAB_DOCKERD_LOG": str(tmp_path / "dockerd.log"), "DOCKERD_WAIT": "1",
           "STAND_IN_PID": str(pid_file), "STAND_IN_FD9": str(fd9)}
    try:
        proc = subprocess.run(["timeout", "30", "bash", str(SCRIPT)], capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL)
        assert proc.returncode == 3 and "dockerd did not come up" in proc.stderr, proc.stdout + proc.stderr
        assert fd9.read_text().strip() == "closed", "the daemon was started holding the set-up lock"
        os.kill(int(pid_file.read_text()), 0)          # it lives on after the script
        with open(lock, "a") as fh:                    # and the next set-up can take the lock
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), 9)
            except ProcessLookupError:
                pass
