"""Property-based fuzz of the twin's pure core: bad input never raises and never hangs a connection.

Hypothesis drives TwinCore (lab.twin.core) through a simulated clock with thousands of generated
frames: random bytes and text, malformed and truncated JSON, oversized frames, unknown fields at
every level, bad base64, long keys, and valid frames out of order. The properties:
  - no call into the core raises;
  - a connection gets at most one close, with a code in 1000-4999 and a reason of <= 123 bytes;
  - a frame that is not one JSON object of a known kind closes its connection with 1007 at once;
  - a connection without a close is consistently open (its phase is not closing) and, once the
    clock has run past the freeze close, every connection has ended in a close with a code.
"""
from __future__ import annotations

import base64
import heapq
import itertools
import json
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.twin import io_actions as A
from lab.twin import wire as W
from lab.twin.core import TwinCore
from lab.twin.model import tone
from lab.twin.session import Phase

MAX_FRAME = 2048        # a small client frame limit, so oversized frames stay cheap to generate
FREEZE_S = 30.0         # a short freeze close, so "every connection ends in a close" is reached quickly


@dataclass(frozen=True)
class _CloseDue:
    conn: int


class Driver:
    """A TwinCore on a simulated clock that checks the close invariants on every action."""

    def __init__(self, seed: int):
        self.core = TwinCore(seed=seed, overrides={"max_client_frame_bytes": MAX_FRAME, "freeze_close_s": FREEZE_S})
        self.now = 0.0
        self.heap: list = []
        self.seq = itertools.count()
        self.closes: dict[int, A.Close] = {}
        self.opened: set[int] = set()
        self.ended: set[int] = set()
        self.client_ended: set[int] = set()     # ended by the client before any close from the twin
        self.frames = 0

    def apply(self, acts: list) -> list:
        for a in acts:
            if isinstance(a, A.Close):
                assert a.conn not in self.closes, f"second close for connection {a.conn}"
                assert 1000 <= a.code <= 4999 and len(a.reason.encode()) <= 123, a
                assert a.at >= self.now - 1e-9
                self.closes[a.conn] = a
                heapq.heappush(self.heap, (a.at, next(self.seq), _CloseDue(a.conn)))
            elif isinstance(a, A.Timer):
                heapq.heappush(self.heap, (a.at, next(self.seq), a.key))
            elif isinstance(a, A.Send):
                assert a.at >= self.now - 1e-9 and isinstance(a.frame, dict)
        return acts

    def run_until(self, t: float) -> None:
        while self.heap and self.heap[0][0] <= t:
            at, _, key = heapq.heappop(self.heap)
            self.now = max(self.now, at)
            if isinstance(key, _CloseDue):
                self.end(key.conn, "close_frame")     # the client sees the close frame and the socket ends
            else:
                self.apply(self.core.timer_fired(key, self.now))
        self.now = max(self.now, t)

    def open(self, conn: int) -> None:
        if conn in self.opened:
            return
        self.opened.add(conn)
        self.apply(self.core.connection_opened(conn, self.now, "v1beta"))

    def feed(self, conn: int, data: bytes | str) -> list:
        self.open(conn)
        if conn in self.ended:
            return []
        self.frames += 1
        return self.apply(self.core.frame_received(conn, data, self.now))

    def end(self, conn: int, how: str) -> None:
        if conn in self.opened and conn not in self.ended:
            self.ended.add(conn)
            self.apply(self.core.connection_ended(conn, how, self.now))

    def check_consistent(self) -> None:
        for conn in self.opened - self.ended:
            c = self.core.sessions.conn(conn)
            assert c.closing == (conn in self.closes), (conn, c.phase)
            assert c.phase is not Phase.ENDED


# ---- frames ---------------------------------------------------------------------------------

FIELDS = ["model", "generationConfig", "generation_config", "responseModalities", "sessionResumption", "handle",
          "transparent", "realtimeInputConfig", "automaticActivityDetection", "disabled", "tools",
          "functionDeclarations", "behavior", "systemInstruction", "parts", "text", "turns", "role",
          "turnComplete", "audio", "video", "data", "mimeType", "mime_type", "mediaChunks", "activityStart",
          "activityEnd", "audioStreamEnd", "functionResponses", "id", "name", "response", "scheduling",
          "inlineData", "functionResponse", "outputAudioTranscription", "inputAudioTranscription"]
# long keys are cheap repeats: hypothesis pays per generated character
keys = st.one_of(st.sampled_from(FIELDS), st.text(max_size=8),
                 st.tuples(st.sampled_from(["k", "é", "\u2603"]), st.integers(60, 400)).map(lambda t: t[0] * t[1]))
leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30),
                   st.sampled_from(["AUDIO", "TEXT", "BLOCKING", "SILENT", "user", "model", "booked", "audio/pcm"]))
anything = st.recursive(leaves, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(keys, kids, max_size=3),
                        max_leaves=6)
bad_b64 = st.one_of(st.text(alphabet="!*?@#$%^&()[]{} ", min_size=1, max_size=40),
                    st.binary(max_size=30).map(lambda b: base64.b64encode(b).decode()[:-1] or "="),
                    st.text(max_size=40))
good_pcm = st.integers(1, 8).map(lambda n: base64.b64encode(tone(0.02 * n, 16000, 300.0)).decode())
b64 = st.one_of(bad_b64, good_pcm)


def _with_noise(required: dict) -> st.SearchStrategy:
    """A body with the given fields (each possibly absent or replaced by any JSON), plus unknown ones."""
    fields = {k: st.one_of(v, anything) for k, v in required.items()}
    return st.tuples(st.fixed_dictionaries({}, optional=fields), st.dictionaries(keys, anything, max_size=1)) \
        .map(lambda t: {**t[1], **t[0]})


blob = _with_noise({"data": b64, "mimeType": st.sampled_from(["audio/pcm;rate=16000", "image/jpeg", "x/y"])})
part = _with_noise({"text": st.text(max_size=40), "inlineData": blob,
                    "functionResponse": _with_noise({"id": st.text(max_size=10), "response": anything})})
turn = _with_noise({"role": st.sampled_from(["user", "model", ""]), "parts": st.lists(part, max_size=3)})
bodies = {
    "setup": _with_noise({
        "model": st.sampled_from(["models/gemini-3.8-live", "models/x"]),
        "generationConfig": _with_noise({"responseModalities": st.lists(st.sampled_from(["AUDIO", "TEXT"]), max_size=2)}),
        "sessionResumption": _with_noise({"handle": st.text(max_size=40), "transparent": st.booleans()}),
        "realtimeInputConfig": _with_noise({"automaticActivityDetection": _with_noise({"disabled": st.booleans()})}),
        "tools": st.lists(_with_noise({"functionDeclarations": st.lists(_with_noise(
            {"name": st.just("book_slot"), "behavior": st.sampled_from(["BLOCKING", "NON_BLOCKING"])}), max_size=2)}),
            max_size=2),
        "systemInstruction": _with_noise({"parts": st.lists(part, max_size=2)}),
        "inputAudioTranscription": st.just({})}),
    "realtimeInput": _with_noise({"audio": blob, "video": blob, "mediaChunks": st.lists(blob, max_size=3),
                                  "text": st.sampled_from(["Book me the 3pm slot tomorrow, please.", "Did you book it?",
                                                           "Actually, stop.", " ", ""]),
                                  "activityStart": st.just({}), "activityEnd": st.just({}),
                                  "audioStreamEnd": st.booleans()}),
    "clientContent": _with_noise({"turns": st.lists(turn, max_size=3), "turnComplete": st.booleans()}),
    "toolResponse": _with_noise({"functionResponses": st.lists(_with_noise(
        {"id": st.text(max_size=20), "name": st.just("book_slot"), "response": anything,
         "scheduling": st.sampled_from(["SILENT", "WHEN_IDLE", "INTERRUPT"])}), max_size=3)}),
    "contextUpdate": anything,
}
top_keys = st.sampled_from(list(bodies) + ["client_content", "realtime_input", "tool_response"])
known_message = top_keys.flatmap(lambda k: bodies[W.camel(k)].map(lambda b: {k: b}))
messages = st.one_of(
    known_message,
    st.dictionaries(keys, anything, max_size=3),                         # unknown top-level fields
    st.tuples(known_message, st.dictionaries(keys, anything, min_size=1, max_size=2))
      .map(lambda t: {**t[1], **t[0]}),                                  # a known kind beside unknown ones
    st.lists(anything, max_size=3),                                     # JSON, but not an object
)
encoded = messages.flatmap(lambda m: st.sampled_from([json.dumps(m), json.dumps(m).encode()]))
frames = st.one_of(
    encoded, encoded, encoded,
    st.binary(max_size=200),                                            # random bytes
    st.text(max_size=200),                                              # random text
    encoded.flatmap(lambda s: st.integers(0, max(0, len(s) - 1)).map(lambda n: s[:n])),   # truncated JSON
    st.integers(MAX_FRAME + 1, MAX_FRAME * 3).map(lambda n: b'{"realtimeInput": {"text": "' + b"x" * n + b'"}}'),
)
# each step: one frame on one of four client slots, then maybe a wait or the client ending that slot's
# connection (its next frame then opens a new connection, as a reconnecting client would)
then = st.one_of(st.none(), st.tuples(st.just("wait"), st.floats(0.0, 3.0)),
                 st.tuples(st.just("end"), st.sampled_from(["eof", "rst", "close_frame"])))
PLAN_MIN = 10
steps = st.lists(st.tuples(st.integers(1, 4), frames, then), min_size=PLAN_MIN, max_size=16)

SETUP = json.dumps({"setup": {"model": "models/gemini-3.8-live", "sessionResumption": {},
                              "generationConfig": {"responseModalities": ["AUDIO"]}}})


def _not_one_known_object(data: bytes | str) -> bool:
    """Is this frame one the wire must refuse whatever the connection's state?"""
    raw = data if isinstance(data, bytes) else data.encode()
    if len(raw) > MAX_FRAME:
        return True
    try:
        obj = json.loads(raw)
    except ValueError:
        return True
    if not isinstance(obj, dict):
        return True
    kinds = [k for k in obj if isinstance(k, str) and W.camel(k) in W.TOP_LEVEL]
    return len(kinds) != 1 or len(obj) != 1


EXAMPLES = 250         # x at least PLAN_MIN frames each: 2500 generated frames or more per run


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(plan=steps, seed=st.integers(0, 2**16), setup_first=st.booleans())
def test_generated_frames_never_raise_and_every_connection_ends_in_a_close(plan, seed, setup_first):
    d = Driver(seed)
    slot_conn = {slot: slot for slot in range(1, 5)}
    ids = itertools.count(5)
    if setup_first:                     # half the runs reach the live phase first, so turns see the frames
        for conn in slot_conn.values():
            d.feed(conn, SETUP)
        d.run_until(1.0)
    fed = d.frames
    for slot, frame, after in plan:
        if slot_conn[slot] in d.ended:
            slot_conn[slot] = next(ids)
        conn = slot_conn[slot]
        was_closing = conn in d.closes
        acts = d.feed(conn, frame)
        if not was_closing and _not_one_known_object(frame):
            closes = [a for a in acts if isinstance(a, A.Close)]
            assert closes and closes[0].code == 1007 and closes[0].at == d.now, (frame, acts)
        if after and after[0] == "wait":
            d.run_until(d.now + after[1])
        elif after and conn not in d.ended:
            if conn not in d.closes:
                d.client_ended.add(conn)
            d.end(conn, after[1])
        d.check_consistent()
    assert d.frames - fed == len(plan) >= PLAN_MIN        # every generated frame reached the core
    # the clock runs past the freeze close: every connection has ended in a close with a code
    d.run_until(d.now + FREEZE_S + 5.0)
    d.check_consistent()
    for conn in d.opened:
        assert conn in d.ended and (conn in d.closes or conn in d.client_ended), conn
