"""A wss run over the veth, captured, finalized into one pcapng that tshark reads and decrypts.

A tiny websockets TLS server (trustme certificate) runs in the endpoint namespace and a client in
the client namespace writes its TLS secrets with ctx.keylog_filename. Half-way a silent blackhole
of the flow drops a few frames (nflog), then clears. finalize() must give one pcapng with the
timeline as comments at the events' exact times, the dropped packets, and decryptable frames.
"""
from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
import time

import pytest

from lab import capture
from lab.errors import CapabilityError
from lab.events import Event, EventLog
from lab.topology.netns import NetnsTopology
from lab.topology.services import Capture
from netem import cleanup
from netem.faults import build
from netem.kernel import in_netns
from netem.table import FaultTable

PORT = 8443


@pytest.fixture
def topo():
    t = NetnsTopology(f"tc{os.getpid()}", endpoint_port=PORT)
    try:
        t.up()
        yield t
    finally:
        t.down()
        cleanup.down(t.run_id, current_ns=False)


async def wss_run(topo: NetnsTopology, run_dir, log: EventLog, table: FaultTable) -> list[str]:
    import trustme
    from websockets.asyncio.client import connect
    from websockets.asyncio.server import serve

    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(topo.endpoint_host).configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    client_ctx.keylog_filename = str(run_dir / "keys.log")

    with in_netns(topo.ns_endpoint):
        ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((topo.endpoint_host, PORT))
    ls.listen()

    async def echo(ws):
        async for m in ws:
            await ws.send(f"echo {m}")

    sent = []
    async with serve(echo, sock=ls, ssl=server_ctx):
        with in_netns(topo.ns_client):
            cs = socket.socket()
        cs.setblocking(False)
        await asyncio.get_running_loop().sock_connect(cs, (topo.endpoint_host, PORT))
        src, sport = cs.getsockname()
        async with connect(f"wss://{topo.endpoint_host}:{PORT}/", sock=cs, ssl=client_ctx,
                           compression=None) as ws:
            for i in range(12):
                if i == 6:
                    f = build({"kind": "blackhole", "name": "mid", "direction": "out",
                               "target": {"src": src, "sport": sport, "dst": topo.endpoint_host, "dport": PORT}})
                    f.apply(table)
                    log.write("fault.apply", src="test", name=f.name, spec=f.spec["kind"])
                    await ws.send("lost-while-blackholed")
                    sent.append("lost-while-blackholed")
                    await asyncio.sleep(0.3)
                    f.clear()
                    log.write("fault.clear", src="test", name=f.name)
                    assert await ws.recv() == "echo lost-while-blackholed"
                log.write("user.say", src="test", text=f"seq={i}", line=i)
                await ws.send(f"seq={i}")
                sent.append(f"seq={i}")
                assert await ws.recv() == f"echo seq={i}"
    return sent


@pytest.mark.netns
def test_wss_run_becomes_one_decryptable_commented_pcapng(topo, tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    log.write("run.start", src="test", scenario="capture-test", topology="netns")
    cap = Capture(topo.client, tmp_path).start()
    with FaultTable(netns=topo.ns_client, handle_signals=False) as table:
        try:
            sent = asyncio.run(wss_run(topo, tmp_path, log, table))
        finally:
            raw = cap.stop()
    log.write("run.end", src="test", status="ok")
    assert {p.name for p in raw} == {"raw-eth.pcap", "raw-nflog.pcap"}

    out = capture.finalize(tmp_path, log.events, keylog=tmp_path / "keys.log")
    assert out == tmp_path / "capture.pcapng"
    info = subprocess.run(["capinfos", str(out)], capture_output=True, text=True).stdout
    assert "Number of decryption secrets in file: 1" in info

    # the timeline: one comment per event, at the event's exact time
    got = capture.comments(out)
    assert [c.split()[1] for _, _, c in got] == [e.kind for e in sorted(log.events, key=lambda e: e.t)]
    for (_, t, text), e in zip(got, sorted(log.events, key=lambda e: e.t)):
        assert abs(t - e.t) < 2e-6 and text.startswith(f"livelab {e.kind} +")
    assert any("fault.apply" in c and "name=mid" in c for _, _, c in got)

    # the decrypted WebSocket frames, both ways, in order (the blackholed one arrives after the clear)
    frames = capture.websocket_frames(out, PORT)
    client = [f["text"] for f in frames if f["src"] == topo.client_host]
    server = [f["text"] for f in frames if f["src"] == topo.endpoint_host]
    assert client == sent
    assert server == [f"echo {m}" for m in sent]

    # what the fault dropped is in the same file, named by the fault, between apply and clear
    drops = capture.dropped(out)
    assert drops and all(p == "ll blackhole mid out" for _, _, p in drops)
    t_apply = log.find("fault.apply")[0].t
    t_clear = log.find("fault.clear")[0].t
    assert all(t_apply <= t <= t_clear + 0.05 for _, t, _ in drops)


def test_finalize_without_tools_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(capture.shutil, "which", lambda tool: None)
    with pytest.raises(CapabilityError, match="mergecap, editcap not installed"):
        capture.finalize(tmp_path, [])


def test_finalize_with_nothing_to_merge_is_a_clear_error(tmp_path):
    if capture.shutil.which("mergecap") is None:
        pytest.skip("mergecap not installed")
    with pytest.raises(Exception, match="nothing to merge"):
        capture.finalize(tmp_path, [])


def test_event_text_is_one_short_line():
    e = Event(kind="conn.closed", t=time.time(), ms=1234.56, src="client",
              data={"conn": 1, "code": 1011, "reason": "a\tb\nc|d" + "x" * 100, "by": "server"})
    text = capture.event_text(e)
    assert text.startswith("conn.closed +1234.6ms src=client conn=1 code=1011 reason=a b c/d")
    assert "\n" not in text and "\t" not in text and "|" not in text and "by=server" in text
