"""The frames a reply sends that are the same every time (its audio chunk without transcript,
generationComplete) are encoded once per twin (lab.twin.wire.Wire.send_fixed): each Send carries
what a fresh build and send_plain would, in binary and in text."""
from __future__ import annotations

import pytest

from lab.twin import wire
from lab.twin.model import tone


@pytest.mark.parametrize("binary", [True, False])
def test_a_fixed_frame_is_what_a_fresh_build_would_send(binary):
    w = wire.Wire(binary=binary)
    built = []

    def voice() -> dict:
        built.append(1)
        return wire.audio_chunk(tone(0.3, 24000, 220.0), 24000)

    first, second = (w.send_fixed(c, "voice", voice, at) for c, at in ((1, 0.5), (2, 0.75)))
    fresh = w.send_plain(2, voice(), 0.75)
    assert len(built) == 2                                  # the fixed one built once, then the fresh one
    assert (second.conn, second.at, second.frame, second.data) == (fresh.conn, fresh.at, fresh.frame, fresh.data)
    assert second.data == wire.encode_frame(fresh.frame, binary)
    assert (first.conn, first.at) == (1, 0.5) and first.data is second.data
    gc = w.send_fixed(3, "generation_complete", wire.generation_complete, 1.0)
    assert gc.frame == wire.generation_complete() and gc.data == w.send_plain(3, wire.generation_complete(), 1.0).data
