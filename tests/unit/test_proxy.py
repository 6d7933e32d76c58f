"""The freezable CONNECT proxy's pure parts: CONNECT parsing, pipes, the freeze state machine, control routing."""
import pytest

from lab.proxy import (DOWN, UP, ControlRequest, Pipe, ProxyCore, ProxyProtocolError, head_end, http_response,
                       parse_connect, parse_control, parse_hostport, route_control)


def test_parse_connect_authority_form():
    req = parse_connect(b"CONNECT endpoint:8443 HTTP/1.1\r\nHost: endpoint:8443\r\nUser-Agent: x\r\n\r\n")
    assert (req.host, req.port, req.version) == ("endpoint", 8443, "HTTP/1.1")
    assert req.headers["user-agent"] == "x"
    assert req.target == "endpoint:8443"


def test_parse_connect_ipv6_and_http10():
    req = parse_connect(b"CONNECT [::1]:443 HTTP/1.0\r\n\r\n")
    assert (req.host, req.port, req.target) == ("::1", 443, "[::1]:443")


@pytest.mark.parametrize("head,status", [
    (b"GET http://x/ HTTP/1.1\r\n\r\n", 405),
    (b"CONNECT endpoint HTTP/1.1\r\n\r\n", 400),            # no port
    (b"CONNECT endpoint:0 HTTP/1.1\r\n\r\n", 400),
    (b"CONNECT endpoint:99999 HTTP/1.1\r\n\r\n", 400),
    (b"CONNECT ::1:443 HTTP/1.1\r\n\r\n", 400),            # v6 without brackets
    (b"CONNECT endpoint:443 HTTP/2\r\n\r\n", 505),
    (b"CONNECT endpoint:443\r\n\r\n", 400),
    (b"CONNECT endpoint:443 HTTP/1.1\r\nbad header\r\n\r\n", 400),
    (b"CONNECT endpoint:443 HTTP/1.1\r\n" + b"X: " + b"a" * 20000 + b"\r\n\r\n", 431),
])
def test_parse_connect_refusals(head, status):
    with pytest.raises(ProxyProtocolError) as e:
        parse_connect(head)
    assert e.value.status == status


def test_head_end_and_response():
    assert head_end(b"CONNECT a:1 HTTP/1.1\r\n") == -1
    buf = b"CONNECT a:1 HTTP/1.1\r\n\r\n\x16\x03\x01"
    assert buf[head_end(buf):] == b"\x16\x03\x01"        # a pipelined TLS ClientHello stays for the tunnel
    r = http_response(502, "Bad Gateway")
    assert r.startswith(b"HTTP/1.1 502 Bad Gateway\r\n") and r.endswith(b"\r\n\r\n")


@pytest.mark.parametrize("text,default,want", [
    ("0.0.0.0:8080", None, ("0.0.0.0", 8080)),
    ("[::]:8081", None, ("::", 8081)),
    (":8081", "127.0.0.1", ("127.0.0.1", 8081)),
    ("8081", "127.0.0.1", ("127.0.0.1", 8081)),
])
def test_parse_hostport(text, default, want):
    assert parse_hostport(text, default) == want


@pytest.mark.parametrize("text", ["8081", "host:", "host:x", ":1", "a:b:1"])
def test_parse_hostport_bad(text):
    with pytest.raises(ValueError):
        parse_hostport(text)


def test_pipe_holds_while_frozen_and_releases_in_order():
    p = Pipe(UP)
    assert p.feed(b"ab") == b"ab"
    p.freeze()
    assert p.feed(b"cd") == b"" and p.feed(b"ef") == b""
    assert p.feed_eof() is False                  # a FIN is held too
    assert (p.received, p.forwarded, len(p.held)) == (6, 2, 4)
    data, eof = p.thaw()
    assert (data, eof) == (b"cdef", True)
    assert (p.forwarded, len(p.held), p.frozen) == (6, 0, False)
    assert p.thaw() == (b"", False)               # the FIN is passed on once


def test_pipe_full_only_when_frozen():
    p = Pipe(DOWN, hold_limit=4)
    p.feed(b"12345")
    assert not p.full
    p.freeze()
    p.feed(b"1234")
    assert p.full


def test_core_freeze_all_and_new_tunnels_start_frozen():
    core = ProxyCore(clock=lambda: 1.0)
    t1 = core.open_tunnel("c:1", "endpoint:8443")
    assert core.freeze() == [1]
    assert t1.frozen and core.frozen
    t2 = core.open_tunnel("c:2", "endpoint:8443")
    assert t2.frozen                               # opened during a global freeze
    t1.up.feed(b"x" * 10)
    t2.down.feed(b"y" * 3)
    st = core.state()
    assert st["frozen"] and st["bytes_held"] == 13 and st["open"] == 2
    rel = core.unfreeze()
    assert {(r.tunnel, r.direction, r.data) for r in rel if r.data} == {(1, UP, b"x" * 10), (2, DOWN, b"y" * 3)}
    assert not core.frozen and not t1.frozen and core.state()["bytes_held"] == 0


def test_core_freeze_first_only_tunnel_1():
    core = ProxyCore(freeze_first=1)
    t1 = core.open_tunnel("c:1", "e:1")
    core.freeze()
    t2 = core.open_tunnel("c:2", "e:1")            # the resume attempt goes through
    assert t1.frozen and not t2.frozen
    assert t2.up.feed(b"hello") == b"hello"
    assert t1.up.feed(b"hello") == b""


def test_core_targeted_freeze_and_errors():
    core = ProxyCore(freeze_first=1)
    core.open_tunnel("c:1", "e:1")
    t2 = core.open_tunnel("c:2", "e:1")
    assert core.freeze(tunnel=2) == [2]            # a targeted freeze ignores the policy
    assert t2.frozen and not core.frozen
    assert [r.tunnel for r in core.unfreeze(tunnel=2)] == [2, 2]
    with pytest.raises(KeyError):
        core.freeze(tunnel=9)
    core.closed(1, "test")
    assert core.freeze(tunnel=1) == []             # a closed tunnel is left alone
    assert core.state()["tunnels"][0]["state"] == "closed"
    with pytest.raises(ValueError):
        ProxyCore(freeze_first=-1)


def test_control_parsing_and_routing():
    assert parse_control(b"POST /freeze?tunnel=1 HTTP/1.1\r\nHost: x\r\n\r\n") == ControlRequest("POST", "/freeze", 1)
    assert route_control(parse_control(b"GET /state HTTP/1.1\r\n\r\n")) == "state"
    assert route_control(parse_control(b"POST /close/ HTTP/1.1\r\n\r\n")) == "close"
    for head, status in [(b"GET /freeze HTTP/1.1\r\n\r\n", 405), (b"POST /nope HTTP/1.1\r\n\r\n", 404),
                         (b"POST /freeze?tunnel=x HTTP/1.1\r\n\r\n", 400)]:
        with pytest.raises(ProxyProtocolError) as e:
            route_control(parse_control(head))
        assert e.value.status == status
