"""Serve a recorded run back: the endpoint as it behaved in a live (or any) run, offline.

A run's `frames.jsonl` (written by the clients through lab.record.frames.FrameRecorder) holds every
server frame per connection, handles as a placeholder and audio as its length. The replay server
gives the k-th connection it accepts the k-th recorded connection: after the client's setup frame
it sends that connection's frames at their recorded offsets (from the connection's first frame),
with a fresh handle in place of the placeholder and silence in place of the audio, and it closes
the connection where the *server* closed it in the record (a 1011 refusal, say). Closes the
client made are left to the client. What the client sends is read and otherwise ignored: this is
a recording, not a model, so a client that behaves differently from the recorded one meets the
recorded server anyway.
"""
from __future__ import annotations

import asyncio
import base64
import json
import secrets
import ssl
from pathlib import Path
from typing import Any

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from lab.errors import LabError
from lab.record.frames import materialize, read_frames, replay_script
from lab.twin.server import make_certs


def _fill_audio(x: Any) -> Any:
    """Recorded audio markers become silence of the same length (valid base64 for the SDK)."""
    if isinstance(x, dict):
        return {k: (base64.b64encode(bytes(int(v.split()[1]) * 3 // 4)).decode()
                    if k == "data" and isinstance(v, str) and v.startswith("<audio ") else _fill_audio(v))
                for k, v in x.items()}
    if isinstance(x, list):
        return [_fill_audio(v) for v in x]
    return x


class ReplayServer:
    def __init__(self, frames: Path | str, host: str = "127.0.0.1", port: int = 0, tls: bool = True,
                 cert_dir: Path | str | None = None, san: list[str] | None = None):
        path = Path(frames)
        if not path.is_file():
            raise LabError(f"no recorded frames at {path}")
        self.script = replay_script(read_frames(path))
        if not self.script:
            raise LabError(f"{path} holds no recorded frames")
        self.order = sorted(self.script)
        self.host, self._port, self.tls = host, port, tls
        self.cert_dir, self.san = cert_dir, list(san or [])
        self.ca_path: str | None = None
        self.accepted = 0
        self._server = None

    @property
    def port(self) -> int:
        return self._server.sockets[0].getsockname()[1]

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    async def start(self) -> "ReplayServer":
        ctx = None
        if self.tls:
            ca, chain, key = make_certs(self.cert_dir or Path.cwd() / "replay-certs", [self.host, *self.san])
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(str(chain), str(key))
            self.ca_path = str(ca)
        self._server = await serve(self._handle, self.host, self._port, ssl=ctx, ping_interval=None,
                                   max_size=None, compression=None)
        return self

    async def stop(self) -> None:
        if self._server:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, ws) -> None:
        k = self.accepted
        self.accepted += 1
        if k >= len(self.order):
            await ws.close(1011, "replay: the record has no more connections")
            return
        steps = self.script[self.order[k]]
        handle = f"replay-{k + 1}-{secrets.token_hex(8)}"
        try:
            await ws.recv()                     # the setup frame
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            for step in steps:
                await asyncio.sleep(max(0.0, t0 + step["after_ms"] / 1000.0 - loop.time()))
                if "close" in step:
                    rec = self._record_close(k, step)
                    if rec is not None:
                        await ws.close(*rec)
                        return
                    continue
                msg = _fill_audio(materialize(step, handle)["send"])
                await ws.send(json.dumps(msg).encode())
            async for _ in ws:                  # keep the connection until the client ends it
                pass
        except ConnectionClosed:
            pass

    def _record_close(self, k: int, step: dict) -> tuple[int, str] | None:
        """The close to replay, if the server made it (the client's own closes are its business)."""
        code = step.get("close")
        by = step.get("by")
        if by not in (None, "server") or not isinstance(code, int) or code in (1005, 1006):
            return None
        return code, step.get("reason") or ""
