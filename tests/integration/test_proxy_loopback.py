"""The freezable CONNECT proxy on loopback: a TLS websockets echo reached through HTTPS_PROXY.

Freeze holds the bytes (nothing reaches the server, the client's TCP connection stays established and
fully acknowledged), unfreeze delivers them in order, close ends the tunnel.
"""
import asyncio
import socket
import ssl
import struct
import time

import pytest
import trustme
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from lab.proxy import FreezeProxy, ProxyControl

TCP_ESTABLISHED = 1


def tcp_info(sock: socket.socket) -> tuple[int, int]:
    """(tcpi_state, tcpi_unacked) of a connected socket."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    state = raw[0]
    unacked = struct.unpack_from("I", raw, 8 + 4 * 4)[0]    # 8 one-byte fields, then rto ato snd_mss rcv_mss unacked
    return state, unacked


@pytest.fixture
def certs(tmp_path):
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    return server_ctx, client_ctx


@pytest.fixture
def proxy_env(monkeypatch):
    """HTTPS_PROXY is set per test; a NO_PROXY naming localhost would silently bypass the proxy."""
    for var in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy",
                "WSS_PROXY", "wss_proxy", "SOCKS_PROXY", "socks_proxy"):
        monkeypatch.delenv(var, raising=False)

    def set_proxy(url: str) -> None:
        monkeypatch.setenv("HTTPS_PROXY", url)
    return set_proxy


async def echo_server(server_ctx, received: list):
    async def handler(ws):
        async for msg in ws:
            received.append((time.monotonic(), msg))
            await ws.send(msg)
    return await serve(handler, "127.0.0.1", 0, ssl=server_ctx, ping_interval=None)


def ws_socket(ws) -> socket.socket:
    return ws.transport.get_extra_info("socket")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_tls_websocket_through_proxy_freeze_unfreeze_close(certs, proxy_env):
    server_ctx, client_ctx = certs

    async def main():
        received: list = []
        server = await echo_server(server_ctx, received)
        port = server.sockets[0].getsockname()[1]
        proxy = await FreezeProxy("127.0.0.1", 0, "127.0.0.1", 0).start()
        ctl = ProxyControl(proxy.control_url)
        proxy_env(proxy.url)
        try:
            # proxy=True is websockets' default: it takes HTTPS_PROXY from the environment
            async with connect(f"wss://localhost:{port}", ssl=client_ctx, ping_interval=None,
                               close_timeout=1) as ws:
                await ws.send("hello")
                assert await asyncio.wait_for(ws.recv(), 5) == "hello"
                st = await asyncio.to_thread(ctl.state)
                assert len(st["tunnels"]) == 1 and st["tunnels"][0]["target"] == f"localhost:{port}"
                assert not st["frozen"]

                # freeze: the client's sends leave its kernel and are ACKed by the proxy's, but
                # nothing reaches the server and nothing comes back
                st = await asyncio.to_thread(ctl.freeze)
                assert st["frozen"] and st["tunnels"][0]["frozen"]
                n_before = len(received)
                for i in range(20):
                    await ws.send(f"m{i}")
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(ws.recv(), 1.0)
                assert len(received) == n_before
                state, unacked = tcp_info(ws_socket(ws))
                assert state == TCP_ESTABLISHED and unacked == 0
                st = await asyncio.to_thread(ctl.state)
                assert st["bytes_held"] > 0 and st["tunnels"][0]["up"]["held"] > 0
                assert st["tunnels"][0]["state"] == "open"

                # unfreeze: the held bytes are delivered, in order
                st = await asyncio.to_thread(ctl.unfreeze)
                assert st["delivered"] > 0 and st["bytes_held"] == 0 and not st["frozen"]
                got = [await asyncio.wait_for(ws.recv(), 5) for _ in range(20)]
                assert got == [f"m{i}" for i in range(20)]
                assert [m for _, m in received[n_before:]] == got

                # close: the proxy ends the tunnel (FIN both ways); the client sees the connection end
                st = await asyncio.to_thread(ctl.close)
                assert st["closed"] == [1] and st["tunnels"][0]["state"] == "closed"
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 5)
        finally:
            await proxy.stop()
            server.close()
            await server.wait_closed()

    run(main())


def test_freeze_only_first_tunnel(certs, proxy_env):
    """Round 2's shape: tunnel 1 frozen, a second connection (the resume attempt) goes through."""
    server_ctx, client_ctx = certs

    async def main():
        received: list = []
        server = await echo_server(server_ctx, received)
        port = server.sockets[0].getsockname()[1]
        proxy = await FreezeProxy("127.0.0.1", 0, "127.0.0.1", 0, freeze_first=1).start()
        ctl = ProxyControl(proxy.control_url)
        proxy_env(proxy.url)
        try:
            ws1 = await connect(f"wss://localhost:{port}", ssl=client_ctx, ping_interval=None, close_timeout=1)
            await asyncio.to_thread(ctl.freeze)
            await ws1.send("lost")
            ws2 = await connect(f"wss://localhost:{port}", ssl=client_ctx, ping_interval=None, close_timeout=1)
            await ws2.send("second")
            assert await asyncio.wait_for(ws2.recv(), 5) == "second"
            assert [m for _, m in received] == ["second"]
            st = await asyncio.to_thread(ctl.state)
            assert [t["frozen"] for t in st["tunnels"]] == [True, False]
            await asyncio.to_thread(ctl.unfreeze)
            assert await asyncio.wait_for(ws1.recv(), 5) == "lost"
            await ws1.close()
            await ws2.close()
        finally:
            await proxy.stop()
            server.close()
            await server.wait_closed()

    run(main())


def test_held_fin_is_delivered_on_unfreeze(proxy_env):
    """A client that closes while frozen: its FIN reaches the target only on unfreeze."""

    async def main():
        got = asyncio.get_running_loop().create_future()

        async def sink(reader, writer):
            data = await reader.read()           # until EOF
            got.set_result((time.monotonic(), data))
            writer.close()

        server = await asyncio.start_server(sink, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        proxy = await FreezeProxy("127.0.0.1", 0, "127.0.0.1", 0).start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
            w.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            assert (await r.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            proxy.freeze()
            w.write(b"bye")
            w.write_eof()
            await asyncio.sleep(0.5)
            assert not got.done()
            t_unfreeze = time.monotonic()
            proxy.unfreeze()
            t, data = await asyncio.wait_for(got, 5)
            assert data == b"bye" and t >= t_unfreeze
            w.close()
        finally:
            await proxy.stop()
            server.close()

    run(main())


def test_refusals(proxy_env):
    async def main():
        proxy = await FreezeProxy("127.0.0.1", 0, "127.0.0.1", 0, connect_timeout=2).start()
        try:
            async def ask(req: bytes) -> bytes:
                r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
                w.write(req)
                line = await r.readline()
                w.close()
                return line
            assert (await ask(b"GET / HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
            # a closed port on loopback: the proxy answers 502
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            closed_port = s.getsockname()[1]
            s.close()
            assert (await ask(f"CONNECT 127.0.0.1:{closed_port} HTTP/1.1\r\n\r\n".encode())).startswith(b"HTTP/1.1 502")
            ctl = ProxyControl(proxy.control_url)
            with pytest.raises(Exception) as e:
                await asyncio.to_thread(ctl.freeze, 7)
            assert "404" in str(e.value)
        finally:
            await proxy.stop()

    run(main())
