"""The proxy's idle timeout (a corporate CONNECT proxy's, issue 15) on loopback: an idle tunnel is
closed after idle_timeout_s, a tunnel that keeps carrying bytes is not."""
import asyncio
import time

import pytest

from lab.proxy import FreezeProxy


async def _echo_server():
    async def echo(r, w):
        while data := await r.read(4096):
            w.write(data)
            await w.drain()
        w.close()
    return await asyncio.start_server(echo, "127.0.0.1", 0)


async def _tunnel(proxy, target_port):
    r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
    w.write(f"CONNECT 127.0.0.1:{target_port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await w.drain()
    assert b" 200 " in await r.readuntil(b"\r\n\r\n")
    return r, w


def test_an_idle_tunnel_is_closed_and_a_talking_one_is_not():
    async def main():
        echo = await _echo_server()
        proxy = await FreezeProxy(control_port=None, idle_timeout_s=0.6).start()
        try:
            port = echo.sockets[0].getsockname()[1]
            (ir, iw), (tr, tw) = await _tunnel(proxy, port), await _tunnel(proxy, port)
            t0 = time.monotonic()

            async def fin_time():
                assert await asyncio.wait_for(ir.read(1), 3) == b""   # the idle one gets its FIN
                return time.monotonic() - t0
            fin = asyncio.create_task(fin_time())
            for _ in range(6):                      # 1.2 s of a byte every 0.2 s
                tw.write(b"p")
                assert await asyncio.wait_for(tr.read(1), 1) == b"p"
                await asyncio.sleep(0.2)
            closed_at = await fin
            tw.write(b"q")
            assert await asyncio.wait_for(tr.read(1), 1) == b"q"
            iw.close()
            tw.close()
            return closed_at
        finally:
            await proxy.stop()
            echo.close()

    closed_at = asyncio.run(main())
    assert 0.5 <= closed_at <= 1.1  # ~0.6 s after its last byte, while the other tunnel kept talking


def test_a_timeout_must_be_positive():
    with pytest.raises(ValueError):
        FreezeProxy(idle_timeout_s=0)
