"""scripts/docker-setup.sh runs one at a time on a machine: test workers' fixtures and other checkouts
may call it together, and apt, dockerd and the base image are the machine's, not a checkout's.

The lock is taken before any step: while another holder has it, the script prints nothing and does
nothing (it is stopped here before it could start apt or dockerd).
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


def test_the_daemon_it_starts_does_not_keep_the_lock():
    # dockerd outlives the script: started with the lock's descriptor open, it would hold the lock
    # for as long as it runs, and every later set-up on the machine would wait forever
    text = SCRIPT.read_text()
    fd = text.split("exec ", 1)[1].split(">", 1)[0].strip()
    starts = [l for l in text.splitlines() if l.strip().startswith("setsid dockerd")]
    assert starts and all(f"{fd}>&-" in l for l in starts), starts
