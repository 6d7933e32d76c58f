"""The black-box app's microphone (lab/clients/mic.py): what it hears, and its socket in real time."""
import asyncio

from lab.clients.mic import CHUNK_BYTES, FORMAT, MicServer, MicStream


def test_silence_until_spoken_then_the_line_in_whole_chunks_then_silence():
    m = MicStream(chunk_bytes=4)
    assert m.next_chunk() == b"\x00" * 4 and not m.speaking
    assert m.speak(b"\x01\x02\x03\x04\x05\x06") == 0.0          # padded to two chunks
    assert m.speak(b"\x07\x07\x07\x07") == 200.0                 # queued after the first line
    assert [m.next_chunk() for _ in range(4)] == [b"\x01\x02\x03\x04", b"\x05\x06\x00\x00",
                                                  b"\x07\x07\x07\x07", b"\x00" * 4]
    assert not m.speaking


def test_readers_get_real_time_pcm_with_the_spoken_line_and_a_stuck_one_is_dropped(tmp_path):
    async def go():
        srv = MicServer(tmp_path / "mic.sock")
        await srv.start()
        assert srv.environment == {"LAB_AUDIO_SOCKET": str(tmp_path / "mic.sock"), "LAB_AUDIO_FORMAT": FORMAT}
        try:
            reader, writer = await asyncio.open_unix_connection(str(srv.path))
            loop = asyncio.get_running_loop()
            first = await reader.readexactly(CHUNK_BYTES)
            assert first == b"\x00" * CHUNK_BYTES
            srv.stream.speak(b"\x11\x22" * (CHUNK_BYTES // 2))
            t0 = loop.time()
            got = []
            while len(got) < 6:
                got.append(await reader.readexactly(CHUNK_BYTES))
            elapsed = loop.time() - t0
            assert b"\x11\x22" * (CHUNK_BYTES // 2) in got        # the line, inside the stream
            # real time: six chunks cannot arrive much faster than 100 ms each (no upper bound: noisy machine)
            assert elapsed > 0.4, elapsed
            assert srv.readers == 1
            writer.close()
        finally:
            await srv.stop()
        assert not srv.path.exists()
        return srv

    srv = asyncio.run(go())
    assert srv.readers_seen == 1
