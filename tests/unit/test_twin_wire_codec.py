"""The twin's fast JSON and base64 paths (lab.twin.wire) say and accept exactly what the stdlib paths did."""
import base64
import json
import random

import pytest

from lab.twin import wire


def _old_encode(frame):
    return json.dumps(frame, separators=(",", ":")).encode()


FRAMES = [
    wire.audio_chunk(bytes(range(256)) * 4),
    wire.output_transcription("Yes, it's booked for 3pm."),
    {**wire.turn_complete(), **wire.usage_metadata({"TEXT": 12, "AUDIO": 64}, {"AUDIO": 10})},
    wire.tool_call("c1", "book_slot", {"slot": "3pm", "party": 2, "ratio": 0.5, "none": None}),
    {"t": "h\u00e9llo \u2603 \x7f \n\t\x01"},            # non-ASCII and DEL: json.dumps escapes them
    {1: "a non-str key"}, {"big": 2 ** 70},              # what orjson refuses
    {"f": [1e-7, 5.5e-05, 0.0001, 1e16, 1.5e300, 5e-324, -0.0, float("nan"), float("inf")]},
]


@pytest.mark.parametrize("frame", FRAMES)
def test_encoded_frames_are_byte_for_byte_json_dumps(frame):
    assert wire.encode_frame(frame) == _old_encode(frame)
    assert wire.encode_frame(frame, binary=False) == _old_encode(frame).decode()


def test_random_floats_encode_as_json_dumps_does():
    rng = random.Random(7)
    for _ in range(5000):
        frame = {"x": rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30)}
        assert wire.encode_frame(frame) == _old_encode(frame), frame


@pytest.mark.parametrize("text", ['{"a": 1e999}', '{"a": "\\ud800"}', '{"a": 1}'.encode("utf-16"),
                                  '{"a": [1, -2, 3.5, "x", null, true]}', '{"n": 18446744073709551615}'])
def test_what_orjson_refuses_is_still_parsed_as_json_loads_did(text):
    assert wire._loads(text) == json.loads(text)


def test_nan_is_still_accepted():
    assert wire._loads('{"a": NaN}')["a"] != wire._loads('{"a": NaN}')["a"]


def test_an_integer_past_64_bits_is_a_double():
    assert wire._loads('{"n": 123456789012345678901234567890}') == {"n": 1.2345678901234568e29}


@pytest.mark.parametrize("data", [b"", b"\x00", b"ab", b"abc", bytes(range(256)) * 3])
def test_base64_in_every_spelling_decodes_to_the_same_bytes(data):
    std = base64.b64encode(data).decode()
    for s in (std, std.rstrip("="), base64.urlsafe_b64encode(data).decode(), " ".join([std[:4], std[4:]])):
        assert wire.b64decode_any(s) == data


@pytest.mark.parametrize("bad", ["a", "ab!c", "abcde", "====", 12])
def test_bad_base64_is_still_refused(bad):
    with pytest.raises(wire.BadInput):
        wire.b64decode_any(bad)


@pytest.mark.parametrize("frame", [{"a": ["x", 1, True, None, {"b": "y" * 5000}]}, {"k\u00e9": 1}, {"k": "\x7f"},
                                   {"n": [None, 2 ** 63 - 1, -(2 ** 63)]}, {"t": ("a", 1)}, {"f": 0.5}])
def test_frames_taken_without_the_output_scan_are_still_json_dumps(frame):
    # the fast path (no float, ASCII strings) must not change a byte either
    assert wire.encode_frame(frame) == _old_encode(frame)


@pytest.mark.parametrize("binary", [True, False])
def test_the_frames_a_reply_sends_unchecked_are_still_json_dumps(binary):
    # send_plain trusts its callers' builders (audio chunk, generationComplete, turnComplete with
    # usageMetadata): every frame of a spoken reply, cut or not, must encode as encode_frame would
    import heapq

    from lab.model_id import DEFAULT_MODEL
    from lab.twin.core import TwinCore
    from lab.twin.io_actions import Send, Timer

    core = TwinCore("developer-api", ["reply_delay_s=0", "new_setup_s=0.01",
                                      f"frame_type={'binary' if binary else 'text'}"], seed=1)
    heap, sent, seq = [], [], iter(range(10 ** 6))

    def run(acts):
        for a in acts:
            if isinstance(a, Timer):
                heapq.heappush(heap, (a.at, next(seq), a.key))
            elif isinstance(a, Send):
                sent.append(a)

    def until(t):
        while heap and heap[0][0] <= t:
            at, _, key = heapq.heappop(heap)
            run(core.timer_fired(key, at))

    run(core.connection_opened(1, 0.0, "v1", "127.0.0.1:1", ""))
    run(core.frame_received(1, json.dumps({"setup": {"model": f"models/{DEFAULT_MODEL}"}}), 0.0))
    until(1.0)
    for i, line in enumerate(["Did you book it?", "Hello?", "Can you book 3pm for two?"]):
        run(core.frame_received(1, json.dumps({"realtimeInput": {"text": line}}), 1.0 + i * 5))
        until(1.0 + i * 5 + 0.05)
        run(core.frame_received(1, json.dumps({"realtimeInput": {"text": "Did you book it?"}}), 1.06 + i * 5))
        until(1.0 + i * 5 + 4.9)
    kinds = {k for s in sent for k in s.frame.get("serverContent", s.frame)}
    assert {"modelTurn", "generationComplete", "turnComplete", "interrupted"} <= kinds, kinds
    for s in sent:
        assert s.data == wire.encode_frame(s.frame, binary), s.frame
