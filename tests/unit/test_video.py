"""The clients' camera (lab.clients.video) and how an SDK client sends its frames: small JPEGs,
each different, at the client's video_fps on whatever connection is current, stopped on request."""
import asyncio
import io

import pytest
from PIL import Image

from lab.backend import Backend
from lab.clients import get
from lab.clients.base import ClientContext, Endpoint
from lab.clients.video import MIME, FrameSource
from lab.errors import LabError
from lab.events import EventLog


def test_frames_are_small_jpegs_of_the_asked_size_each_different_and_repeatable():
    src = FrameSource(width=96, height=64)
    frames = [src.frame(n) for n in range(12)]
    for f in frames:
        assert f[:2] == b"\xff\xd8" and f[-2:] == b"\xff\xd9"       # SOI ... EOI
        assert len(f) < 8000
        img = Image.open(io.BytesIO(f))
        assert img.format == "JPEG" and img.size == (96, 64)
    assert len(set(frames)) == len(frames)
    assert FrameSource(width=96, height=64).frame(5) == frames[5]
    assert src.made == 12 and MIME == "image/jpeg"


def test_a_frame_too_small_to_draw_on_is_refused():
    with pytest.raises(ValueError, match="too small"):
        FrameSource(width=8, height=8)


class _Session:
    def __init__(self):
        self.sent = []

    async def send_realtime_input(self, **kw):
        self.sent.append(kw)


class _Conn:
    def __init__(self, n):
        self.n, self.usable, self.closed = n, True, False
        self.s = _Session()

    async def send(self, fn):
        await fn(self.s)
        return True


def _client(**params):
    log = EventLog()
    ep = Endpoint(base_url="https://127.0.0.1:9", api_key="test", ca_path=None)
    return get("probe")(ClientContext(endpoint=ep, log=log, backend=Backend(log), params=params)), log


def test_the_camera_sends_frames_on_the_current_connection_until_stopped():
    async def main():
        cl, log = _client(video_fps=20.0)
        a, b = _Conn(1), _Conn(2)
        cl.current = a
        cl.start_video()
        await asyncio.sleep(0.2)
        a.usable = False                    # lost: nothing goes to it, the next connection gets them
        await asyncio.sleep(0.1)
        cl.current = b
        await asyncio.sleep(0.2)
        await cl.stop_video()
        n_a, n_b = len(a.s.sent), len(b.s.sent)
        await asyncio.sleep(0.15)
        assert (len(a.s.sent), len(b.s.sent)) == (n_a, n_b)           # stopped
        assert n_a >= 2 and n_b >= 2
        blobs = [x["video"] for x in a.s.sent + b.s.sent]
        assert all(bl.mime_type == "image/jpeg" and bl.data[:2] == b"\xff\xd8" for bl in blobs)
        assert len({bl.data for bl in blobs}) == len(blobs)
        assert log.find("video.start")[0]["fps"] == 20.0
        assert log.find("video.stop")[0]["frames"] >= n_a + n_b
    asyncio.run(main())


def test_audio_stream_end_is_sent_and_recorded():
    async def main():
        cl, log = _client()
        cl.current = c = _Conn(1)
        await cl.action("audio_stream_end")
        assert c.s.sent == [{"audio_stream_end": True}]
        assert log.find("user.audio_stream_end")[0]["sent"] is True
    asyncio.run(main())


def test_video_fps_of_zero_is_one_clear_error():
    async def main():
        cl, _ = _client(video_fps=0)
        cl.current = _Conn(1)
        with pytest.raises(LabError, match="video_fps must be above 0"):
            cl.start_video()
    asyncio.run(main())


def test_a_camera_on_from_the_start_with_a_bad_rate_is_refused_at_construction():
    with pytest.raises(LabError, match="video_fps must be above 0"):
        _client(video=True, video_fps=-1)
