"""The fork server's pure parts: its messages, what it serves, the child's stdio as Popen reads its
keywords, the /etc files a namespace binds. The server itself forks into namespaces (root): that is
tests/integration/test_forkserver.py."""
import os
import subprocess
import sys

import pytest

from lab.forkserver import client as forked
from lab.forkserver.protocol import ProtocolError, Request, decode, encode, interpreter_env, servable
from lab.topology.nsenter import etc_binds

PY = sys.executable
REQ = Request((PY, "-m", "lab", "twin", "serve", "--port", "8443"), {"PATH": "/bin", "PYTHONUNBUFFERED": "1"},
              "/work", "ll-r1-e", True)


def test_a_request_goes_through_the_wire_unchanged():
    assert Request.decode(REQ.encode()) == REQ
    assert REQ.module_argv() == ["-m", "twin", "serve", "--port", "8443"]


@pytest.mark.parametrize("change, why", [
    ({"argv": ["/bin/tcpdump", "-i", "eth0"]}, "only -m lab"),
    ({"argv": [PY, "-m"]}, "argv"),
    ({"argv": "python -m lab list"}, "argv"),
    ({"env": {"A": 1}}, "env"),
    ({"cwd": "relative/dir"}, "cwd"),
    ({"netns": "../../etc"}, "netns"),
    ({"netns": ""}, "netns"),
    ({"new_session": "yes"}, "new_session"),
])
def test_a_bad_request_is_refused_with_what_is_wrong(change, why):
    msg = {**decode(REQ.encode()), **change}
    with pytest.raises(ProtocolError, match=why):
        Request.decode(encode(msg))


def test_a_message_that_is_not_a_json_object_or_misses_a_field_is_refused():
    for data in (b"\xff\x00", b"[1, 2]", b"not json"):
        with pytest.raises(ProtocolError):
            decode(data)
    with pytest.raises(ProtocolError, match="'netns'"):
        Request.decode(encode({"argv": list(REQ.argv), "env": {}, "cwd": "/", "new_session": False}))


def test_only_the_lab_entry_point_under_the_same_interpreter_settings_is_served():
    env = {"PATH": "/bin", "PYTHONPATH": "/repo"}
    assert servable([PY, "-m", "lab", "agent"], {**env, "PYTHONUNBUFFERED": "1"}, PY, env) is None
    assert servable(["tcpdump", "-i", "eth0"], env, PY, env)
    assert servable(["/other/venv/bin/python", "-m", "lab", "agent"], env, PY, env)
    assert servable([PY, "-m", "lab.agent"], env, PY, env)
    assert "PYTHON" in servable([PY, "-m", "lab", "agent"], {"PYTHONPATH": "/elsewhere"}, PY, env)
    assert interpreter_env({"PYTHONUNBUFFERED": "1", "PYTHONHASHSEED": "0", "HOME": "/"}) == {"PYTHONHASHSEED": "0"}


def test_the_childs_stdio_follows_popens_keywords():
    with open(os.devnull, "w") as fh:
        child, close_after, ours = forked._stdio({"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT,
                                                   "stdin": fh})
        try:
            assert child[0] == fh.fileno()              # a file: its descriptor
            assert child[2] == child[1]                 # STDOUT: the same pipe
            assert set(ours) == {"stdout"} and close_after == [child[1]]
            os.write(child[1], b"x")
            assert os.read(ours["stdout"], 1) == b"x"   # our end reads what the child's end writes
        finally:
            for fd in close_after + list(ours.values()):
                os.close(fd)
    child, close_after, ours = forked._stdio({"stdin": subprocess.DEVNULL})
    try:
        assert child[1:] == [1, 2] and ours == {}       # not given: inherited, as Popen does
        assert os.path.realpath(f"/proc/self/fd/{child[0]}") == os.devnull
    finally:
        for fd in close_after:
            os.close(fd)


def test_popen_keywords_the_child_cannot_honour_are_exec_d(monkeypatch):
    class NotStarted(forked.ForkServer):
        def __init__(self):   # no process: spawn must decline before it would ask the server
            self.env = dict(os.environ)

        def ready(self, timeout=0):
            raise AssertionError("asked the server for a command it cannot run")
    s = NotStarted()
    assert s.spawn("ll-x-c", [PY, "-m", "lab", "agent"], preexec_fn=lambda: None) is None
    assert s.spawn("ll-x-c", ["tcpdump", "-i", "eth0"], stdout=subprocess.PIPE) is None


def test_the_switch_turns_the_fork_server_off(monkeypatch):
    monkeypatch.setenv(forked.ENV_SWITCH, "0")
    assert forked.shared() is None


def test_the_namespaces_etc_files_are_bound_over_etc(tmp_path):
    (tmp_path / "ll-r-c").mkdir()
    (tmp_path / "ll-r-c" / "resolv.conf").write_text("nameserver 10.0.0.1\n")
    (tmp_path / "ll-r-c" / "hosts").write_text("")
    assert etc_binds("ll-r-c", tmp_path) == [(tmp_path / "ll-r-c" / "hosts", forked.Path("/etc/hosts")),
                                             (tmp_path / "ll-r-c" / "resolv.conf", forked.Path("/etc/resolv.conf"))]
    assert etc_binds("ll-none", tmp_path) == []


def test_a_fork_server_that_cannot_start_says_so_once_and_every_command_is_exec_d():
    lines = []
    server = forked.ForkServer(log=lines.append)
    server._proc.kill()                      # it ends before it could say ready
    assert server.ready(timeout=30) is False and server.ready() is False
    assert len(lines) == 1 and "before it was ready" in lines[0] and "ip netns exec" in lines[0]
    assert server.spawn("ll-x-c", [PY, "-m", "lab", "agent"], stdout=subprocess.PIPE) is None
    assert not forked.Path(server.socket_path).parent.exists()
