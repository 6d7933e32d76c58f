"""The proxy's --resolve (lab/proxy.py): a CONNECT to a name it maps dials the mapped address, so an
app that names the API by its real hostname reaches the twin through the proxy. Loopback only."""
import asyncio

import pytest

from lab.errors import LabError
from lab.proxy import FreezeProxy, parse_resolve
from lab.topology.services import Proxy


def test_a_mapped_name_is_dialled_at_its_address():
    async def main():
        async def hello(r, w):
            w.write(b"twin here")
            await w.drain()
            w.close()
        target = await asyncio.start_server(hello, "127.0.0.1", 0)
        port = target.sockets[0].getsockname()[1]
        proxy = await FreezeProxy(resolve={"Generativelanguage.googleapis.com": "127.0.0.1"}).start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
            w.write(f"CONNECT generativelanguage.googleapis.com:{port} HTTP/1.1\r\n\r\n".encode())
            await w.drain()
            assert b" 200 " in await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5)
            assert await asyncio.wait_for(r.read(100), 5) == b"twin here"
            w.close()
            # a name it does not map is dialled as DNS has it: here no such name, so 502
            r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
            w.write(f"CONNECT no-such-host.invalid:{port} HTTP/1.1\r\n\r\n".encode())
            await w.drain()
            assert b" 502 " in await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 15)
            w.close()
        finally:
            await proxy.stop()
            target.close()
    asyncio.run(main())


def test_resolve_items_are_name_equals_address():
    assert parse_resolve(["A.example=10.0.0.2", "b=::1"]) == {"a.example": "10.0.0.2", "b": "::1"}
    for bad in ("noequals", "=10.0.0.1", "a=", "a b=1"):
        with pytest.raises(LabError, match="NAME=ADDR"):
            parse_resolve([bad])


def test_the_proxy_service_passes_its_names():
    class Node:
        host = "10.0.0.2"
    argv = Proxy(Node(), resolve={"generativelanguage.googleapis.com": "10.0.0.2"}).argv()
    assert argv[argv.index("--resolve") + 1] == "generativelanguage.googleapis.com=10.0.0.2"
    assert "--resolve" not in Proxy(Node()).argv()
