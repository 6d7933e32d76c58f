"""The fork server on real namespaces: a forked service is in its node's namespace with `ip netns
exec`'s view of /sys, says ready on its pipe, ends on a signal with Popen's return code; a kill -9 of
the orchestrator leaves the fork server gone and its children to `lab down`, as exec'd ones."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.forkserver import client as forked
from lab.topology.netns import NetnsTopology
from lab.topology.services import Proxy
from netem import cleanup
from netem.kernel import list_netns

sys.path.insert(0, str(Path(__file__).parent))   # its helper beside it (pytest's importlib mode adds no path)
import killable  # noqa: E402

pytestmark = pytest.mark.netns


@pytest.fixture
def topo(tmp_path):
    t = NetnsTopology(f"fk{os.getpid()}", pid_dir=tmp_path / "pids")
    t.up()
    yield t
    t.down()
    cleanup.down(t.run_id, pid_dir=tmp_path / "pids")


def test_a_forked_service_is_in_its_namespace_and_ends_like_a_popen(topo, tmp_path):
    proxy = Proxy(topo.endpoint).start()
    proc = proxy.proc
    assert isinstance(proc, forked.ForkedProcess), "the lab's own process was exec'd, not forked"
    assert os.stat(f"/proc/{proc.pid}/ns/net").st_ino == os.stat(f"/run/netns/{topo.ns_endpoint}").st_ino
    assert os.stat(f"/proc/{proc.pid}/ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino
    # its /sys is the namespace's: the veth end is there, the host's devices are not
    assert sorted(os.listdir(f"/proc/{proc.pid}/root/sys/class/net")) == ["eth0", "lo"]
    pidfiles = list((tmp_path / "pids").glob(f"{topo.run_id}.proxy.{proc.pid}.pid"))
    assert len(pidfiles) == 1
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.1)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    proc.kill()                          # ended: nothing to signal, and no error


def test_a_short_command_gives_its_output_and_exit_code(topo):
    proc = topo.client.popen([sys.executable, "-m", "lab", "list"], role="proc", stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    assert proc.wait(timeout=60) == 0
    assert isinstance(proc, forked.ForkedProcess) and "control" in out
    bad = topo.client.popen([sys.executable, "-m", "lab", "run", "no-such-scenario"], role="proc",
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert bad.wait(timeout=60) != 0 and b"no-such-scenario" in bad.stderr.read()


def test_kill_9_of_the_orchestrator_ends_the_fork_server_and_down_ends_its_children(tmp_path):
    run_id = f"fx{os.getpid()}"
    piddir = tmp_path / "pids"
    p, info = killable.start(f"""
        import json, pathlib, time
        from lab.forkserver import client as forked
        from lab.topology.netns import NetnsTopology
        from lab.topology.services import Proxy
        topo = NetnsTopology({run_id!r}, pid_dir=pathlib.Path({str(piddir)!r}))
        topo.up()
        proxy = Proxy(topo.endpoint).start()
        server = forked.shared()
        print(json.dumps({{"child": proxy.proc.pid, "server": server._proc.pid,
                          "socket": server.socket_path, "forked": isinstance(proxy.proc, forked.ForkedProcess)}}),
              flush=True)
        time.sleep(60)
    """)
    try:
        assert info["forked"]
        killable.kill_9(p)
        _wait_gone(info["server"])                         # its stdin pipe closed: it ends
        assert not Path(info["socket"]).exists() and not Path(info["socket"]).parent.exists()
        assert cleanup._alive(info["child"], None)          # the child runs on, like an exec'd one
        report = cleanup.down(run_id, pid_dir=piddir)
        assert report["errors"] == []
        assert not cleanup._alive(info["child"], None)
        assert not [n for n in list_netns() if n.startswith(f"ll-{run_id}-")]
        assert list(piddir.glob("*.pid")) == []
    finally:
        killable.kill_9(p)
        for pid in (info["child"], info["server"]):
            cleanup.stop_pid(pid, grace=0.2)
        cleanup.down(run_id, pid_dir=piddir)


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while cleanup._alive(pid, None):
        assert time.monotonic() < deadline, f"pid {pid} still alive after {timeout} s"
        time.sleep(0.05)


def test_a_fork_server_whose_orchestrator_died_before_it_was_ready_leaves_nothing():
    p, info = killable.start("""
        import json, time
        from lab.forkserver import client as forked
        server = forked.shared()          # started, still importing
        print(json.dumps({"server": server._proc.pid, "socket": server.socket_path}), flush=True)
        time.sleep(60)
    """)
    try:
        killable.kill_9(p)
        _wait_gone(info["server"], timeout=60)   # it finishes its imports, finds no one, ends
        assert not Path(info["socket"]).parent.exists()
    finally:
        killable.kill_9(p)
        cleanup.stop_pid(info["server"], grace=0.2)
