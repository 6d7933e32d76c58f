"""The twin's sans-I/O core driven on a simulated clock: no sockets, no asyncio, no sleeping."""
from __future__ import annotations

import base64
import heapq
import itertools
import json
import math
import re
from dataclasses import dataclass

import pytest

from lab.twin import io_actions as A
from lab.twin import wire as W
from lab.twin import model as M
from lab.twin.core import TwinCore
from lab.twin.model import tone
from lab.stats.distributions import bounds

SERVER_KEYS = {"setupComplete", "serverContent", "toolCall", "toolCallCancellation", "usageMetadata", "goAway",
               "sessionResumptionUpdate", "voiceActivityDetectionSignal", "voiceActivity"}
REFUSE = (1011, "Internal error encountered.")


@dataclass(frozen=True)
class CloseDue:
    """The simulated client sees the server's close frame arrive (not a twin timer)."""
    conn: int


class Sim:
    """Runs a TwinCore with a heap of timers and closes; a Close ends its connection when due."""

    def __init__(self, profile="developer-api", **overrides):
        self.core = TwinCore(profile, overrides or None, seed=7)
        self.now = 0.0
        self.heap: list = []
        self.seq = itertools.count()
        self.sent: dict[int, list[tuple[float, dict, object]]] = {}
        self.closed: dict[int, tuple[float, int, str]] = {}
        self.logs: list[A.Log] = []
        self.ended: set[int] = set()

    def apply(self, acts):
        for a in acts:
            if isinstance(a, A.Send):
                assert a.at >= self.now - 1e-9
                self.sent.setdefault(a.conn, []).append((a.at, a.frame, a.data))
            elif isinstance(a, A.Close):
                self.closed[a.conn] = (a.at, a.code, a.reason)
                heapq.heappush(self.heap, (a.at, next(self.seq), CloseDue(a.conn)))
            elif isinstance(a, A.Timer):
                heapq.heappush(self.heap, (a.at, next(self.seq), a.key))
            elif isinstance(a, A.Log):
                self.logs.append(a)
        return acts

    def run(self, until: float):
        while self.heap and self.heap[0][0] <= until:
            at, _, key = heapq.heappop(self.heap)
            self.now = max(self.now, at)
            if isinstance(key, CloseDue):
                if key.conn not in self.ended:
                    self.end(key.conn, "close_frame")
            else:
                self.apply(self.core.timer_fired(key, self.now))
        self.now = max(self.now, until)

    def after(self, dt: float):
        self.run(self.now + dt)

    def open(self, conn: int):
        self.apply(self.core.connection_opened(conn, self.now, "v1"))

    def send(self, conn: int, obj):
        data = obj if isinstance(obj, (str, bytes)) else json.dumps(obj)
        self.apply(self.core.frame_received(conn, data, self.now))

    def end(self, conn: int, how="eof"):
        self.ended.add(conn)
        self.apply(self.core.connection_ended(conn, how, self.now))

    def frames(self, conn: int, key: str | None = None):
        return [f for _, f, _ in self.sent.get(conn, []) if key is None or key in f]

    def content(self, conn: int, field: str):
        return [f["serverContent"][field] for f in self.frames(conn, "serverContent") if field in f["serverContent"]]

    def said(self, conn: int):
        """The model's sentences: outputTranscription comes in pieces, a turn's pieces join to one."""
        out, cur = [], ""
        for f in self.frames(conn, "serverContent"):
            sc = f["serverContent"]
            cur += sc.get("outputTranscription", {}).get("text", "")
            if (sc.get("turnComplete") or sc.get("interrupted")) and cur:
                out.append(cur)
                cur = ""
        return out + ([cur] if cur else [])

    def handle(self, conn: int) -> str:
        ups = self.frames(conn, "sessionResumptionUpdate")
        return ups[-1]["sessionResumptionUpdate"]["newHandle"]

    def setup(self, conn: int, handle=None, extra=None):
        self.open(conn)
        sr = {"handle": handle} if handle else {}
        body = {"model": "models/gemini-3.8-live", "generationConfig": {"responseModalities": ["AUDIO"]},
                "sessionResumption": sr, "outputAudioTranscription": {}, "inputAudioTranscription": {}}
        body.update(extra or {})
        self.send(conn, {"setup": body})

    def text(self, conn: int, text: str):
        self.send(conn, {"realtime_input": {"text": text}})

    def logs_of(self, kind):
        return [lg.fields for lg in self.logs if lg.kind == kind]

    def within(self, name: str, seconds: float) -> bool:
        """Is `seconds` a value the profile's delay `name` can take (between its min and max)?"""
        lo, hi = bounds(self.core.profile[name])
        return lo - 1e-9 <= seconds <= hi + 1e-9


def new_session(sim: Sim, conn=1, **kw) -> str:
    sim.setup(conn, **kw)
    sim.after(0.4)
    return sim.handle(conn)


# ------------------------------------------------------------------------------------------ routes

@pytest.mark.parametrize("path,route", [
    ("/ws/google.ai.generativelanguage.v1.GenerativeService.BidiGenerateContent", "v1"),
    ("//ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent", "v1beta"),
    ("/prefix/x//ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContentConstrained",
     "v1alpha-constrained"),
    ("//ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent", "vertex"),
    ("/ws/google.ai.generativelanguage.v1.GenerativeService.BidiGenerateContent?key=abc", "v1"),
])
def test_routes_accepted(path, route):
    up = W.check_upgrade(path, {})
    assert up.status is None and up.route == route


@pytest.mark.parametrize("path", ["/", "/ws/google.ai.generativelanguage.v2.GenerativeService.BidiGenerateContent",
                                  "/ws/google.ai.generativelanguage.v1.GenerativeService.GenerateContent"])
def test_unknown_path_is_404(path):
    assert W.check_upgrade(path, {}).status == 404


P = "/ws/google.ai.generativelanguage.v1.GenerativeService.BidiGenerateContent"


@pytest.mark.parametrize("path,headers,status", [
    (P, {}, 401),
    (P, {"x-goog-api-key": "wrong"}, 403),
    (P, {"x-goog-api-key": "sekrit"}, None),
    (P + "?key=sekrit", {}, None),
    (P + "?key=nope", {}, 403),
    (P, {"Authorization": "Token sekrit"}, None),
    (P, {"authorization": "Bearer sekrit"}, None),
    (P, {"Authorization": "Basic sekrit"}, 401),
    (P, {"x-goog-api-key": "auth_tokens/x", "Authorization": "Token sekrit"}, None),
])
def test_key_check(path, headers, status):
    assert W.check_upgrade(path, headers, api_key="sekrit").status == status


def test_no_configured_key_accepts_anything():
    assert W.check_upgrade(P, {"x-goog-api-key": "anything"}).status is None
    assert W.check_upgrade(P, {}).status is None


# ------------------------------------------------------------------------------------------ parsing

def test_parse_normalises_snake_and_camel_everywhere_but_user_data():
    kind, body = W.parse_client_frame(json.dumps({"tool_response": {"function_responses": [
        {"id": "fc-1", "will_continue": False, "response": {"some_field": 1}}]}}))
    assert kind == "toolResponse"
    fr = body["functionResponses"][0]
    assert fr["willContinue"] is False and fr["response"] == {"some_field": 1}
    kind, body = W.parse_client_frame(b'{"setup": {"generation_config": {"response_modalities": ["AUDIO"]}}}')
    assert kind == "setup" and body["generationConfig"]["responseModalities"] == ["AUDIO"]
    kind, _ = W.parse_client_frame('{"contextUpdate": {"systemInstruction": {}}}')
    assert kind == "contextUpdate"


@pytest.mark.parametrize("raw,fragment", [
    ("not json", "Invalid JSON payload"),
    ("[1, 2]", "Expected an object"),
    ('{"bogus": {}}', 'Unknown name "bogus"'),
    ('{"setup": {}, "client_content": {}}', "Only one"),
    ("{}", "invalid argument"),
    ('{"realtime_input": 5}', "Expected an object"),
])
def test_parse_rejects(raw, fragment):
    with pytest.raises(W.BadInput) as ei:
        W.parse_client_frame(raw)
    assert fragment in ei.value.reason


def test_parse_rejects_oversize():
    with pytest.raises(W.BadInput, match="exceeds"):
        W.parse_client_frame('{"realtime_input": {"text": "' + "x" * 2000 + '"}}', max_bytes=1000)


def test_base64_both_alphabets_and_padding():
    raw = bytes([0xFF, 0xFE, 0xFD, 0x00, 0x10])
    for enc in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
                base64.urlsafe_b64encode(raw).decode().rstrip("=")):
        assert W.b64decode_any(enc) == raw
    for bad in ("@@@@", "abcde", 5):
        with pytest.raises(W.BadInput):
            W.b64decode_any(bad)


# ------------------------------------------------------------------------------------------ handshake

def test_setup_complete_is_first_then_exactly_one_handle():
    sim = Sim(reply_delay_s=0.1, tool_call_delay_s=0.1)
    sim.setup(1)
    sim.after(0.2)
    assert sim.frames(1) == []                      # not before new_setup_s
    sim.after(0.2)
    frames = sim.frames(1)
    assert list(frames[0]) == ["setupComplete"]
    assert sim.within("new_setup_s", sim.sent[1][0][0])
    sim.after(0.2)                                  # the update comes 27-200 ms after setupComplete
    upd = sim.frames(1)[1]["sessionResumptionUpdate"]
    assert upd["resumable"] is True and len(upd["newHandle"]) == 36
    assert sim.within("handle_update_delay_s", sim.sent[1][1][0] - sim.sent[1][0][0])
    assert "lastConsumedClientMessageIndex" not in upd
    for line in ("Book me the 3pm slot tomorrow, please.", "Did you book it?"):
        sim.text(1, line)
        sim.after(6)
    assert len(sim.frames(1, "sessionResumptionUpdate")) == 1
    assert isinstance(sim.sent[1][0][2], bytes)      # binary frames by default


def test_text_frames_option_and_no_update_without_resumption():
    sim = Sim(frame_type="text")
    sim.open(1)
    sim.send(1, {"setup": {"model": "models/gemini-3.8-live"}})
    sim.after(0.5)
    assert [list(f) for f in sim.frames(1)] == [["setupComplete"]]
    assert isinstance(sim.sent[1][0][2], str)


def test_only_known_camel_case_top_level_keys_and_no_cancellation():
    sim = Sim(default_tool_behavior="BLOCKING", reply_delay_s=0.1, tool_call_delay_s=0.1)
    new_session(sim)
    sim.text(1, "Book me the 3pm slot tomorrow, please.")
    sim.after(1)
    sim.text(1, "Actually, stop. Don't book it.")
    sim.after(2)
    for call in sim.frames(1, "toolCall"):
        sim.send(1, {"tool_response": {"functionResponses": [
            {"id": call["toolCall"]["functionCalls"][0]["id"], "response": {"status": "booked"}}]}})
    sim.after(5)
    for f in sim.frames(1):
        assert set(f) <= SERVER_KEYS and "toolCallCancellation" not in f
        assert all("_" not in k for k in f)


# ------------------------------------------------------------------------------------------ the lock

def test_resume_refused_while_old_connection_open_then_unlocked_by_its_close():
    sim = Sim()
    h = new_session(sim)
    sim.text(1, "hello")
    sim.after(5)
    # the old connection stays open server-side: every attempt is refused
    for conn, wait in ((2, 0.0), (3, 60.0), (4, 400.0)):
        sim.after(wait)
        t0 = sim.now
        sim.setup(conn, handle=h)
        sim.after(1.0)
        at, code, reason = sim.closed[conn]
        assert (code, reason) == REFUSE and sim.within("refuse_close_s", at - t0)
        assert sim.frames(conn) == []
    assert [f["why"] for f in sim.logs_of("twin.refuse")] == ["old_connection_open"] * 3
    # the client closes the old connection; the next resume works 0.5-0.6 s later
    sim.end(1, "close_frame")
    t0 = sim.now
    sim.setup(5, handle=h)
    sim.after(1.0)
    assert 5 not in sim.closed
    at = sim.sent[5][0][0]
    assert list(sim.frames(5)[0]) == ["setupComplete"] and sim.within("resume_setup_s", at - t0)
    assert len(sim.frames(5, "sessionResumptionUpdate")) == 1
    assert 0.001 <= sim.sent[5][1][0] - at <= 0.003         # a resumed connection's update: 1-3 ms


def test_idle_drop_refused_until_idle_release_then_works():
    sim = Sim()
    h = new_session(sim)
    sim.send(1, {"realtime_input": {"audio": {"data": base64.b64encode(bytes(3200)).decode(),
                                              "mime_type": "audio/pcm;rate=16000"}}})
    last = sim.now
    sim.after(0.05)
    sim.end(1, "eof")
    sim.setup(2, handle=h)
    sim.after(1.0)
    assert sim.closed[2][1:] == REFUSE
    assert sim.logs_of("twin.refuse")[-1]["why"] == "idle_release"
    assert sim.now >= last + 1.0
    sim.after(0.6)                                   # > 1.5 s after the last frame
    sim.setup(3, handle=h)
    sim.after(1.0)
    assert 3 not in sim.closed and "setupComplete" in sim.frames(3)[0]


def test_server_activity_counts_for_the_idle_release_of_a_silent_client():
    # A text client says its line and falls silent; the server's toolCall, 1 s later, is the session's
    # last activity. An abort 1 s after the call (round 1's timing) finds the client silent for 2 s,
    # beyond idle_release_s, yet it is an idle drop 1 s after the session's last frame: refused.
    sim = Sim(tool_call_delay_s=1.0)
    h = new_session(sim)
    said_at = sim.now
    sim.text(1, "Book me the 3pm slot tomorrow, please.")
    sim.after(1.2)
    call_at = next(at for at, f, _ in sim.sent[1] if "toolCall" in f)
    assert call_at - said_at >= 0.9
    sim.after(call_at + 1.0 - sim.now)
    assert sim.now - said_at > 1.5
    sim.end(1, "rst")
    sim.setup(2, handle=h)
    sim.after(1.0)
    assert sim.closed[2][1:] == REFUSE
    assert sim.logs_of("twin.refuse")[-1]["why"] == "idle_release"


def test_speaking_drop_resumes_at_once():
    sim = Sim(reply_delay_s=0.1)
    h = new_session(sim)
    sim.text(1, "Did you book it?")
    sim.after(0.5)
    assert sim.frames(1, "serverContent")            # speaking now
    sim.end(1, "rst")
    assert sim.logs_of("twin.conn.end")[-1]["speaking"] is True
    sim.setup(2, handle=h)
    sim.after(1.0)
    assert 2 not in sim.closed and "setupComplete" in sim.frames(2)[0]


def test_concurrent_resume_attempts_only_one_wins():
    sim = Sim()
    h = new_session(sim)
    sim.end(1, "close_frame")
    sim.after(2)
    sim.setup(2, handle=h)
    sim.setup(3, handle=h)
    sim.after(1)
    assert 2 not in sim.closed and sim.closed[3][1:] == REFUSE


def test_unknown_handle_refused():
    sim = Sim()
    sim.setup(1, handle="no-such-handle")
    sim.after(1)
    assert sim.closed[1][1] == 1011 and sim.logs_of("twin.refuse")[0]["why"] == "unknown_handle"


def test_freeze_close_kills_the_session():
    sim = Sim(freeze_close_s=30)
    h = new_session(sim)
    sim.text(1, "hello")
    sim.after(20)
    sim.send(1, {"realtime_input": {"audio_stream_end": True}})   # data re-arms the freeze timer
    sim.after(25)
    assert 1 not in sim.closed
    sim.after(10)                                                 # 30 s without client data
    at, code, reason = sim.closed[1]
    assert (code, reason) == REFUSE
    assert sim.logs_of("twin.conn.end")[-1]["how"] == "server_timeout"
    for conn in (2, 3):
        sim.after(5)
        sim.setup(conn, handle=h)
        sim.after(1)
        assert sim.closed[conn][1:] == REFUSE
    assert sim.logs_of("twin.refuse")[-1]["why"] == "session_dead"


def test_handle_from_before_the_user_spoke_restores_the_latest_state():
    sim = Sim(tool_call_delay_s=0.1, reply_delay_s=0.1)
    h = new_session(sim)                               # issued before anything was said
    sim.text(1, "Book me the 3pm slot tomorrow, please.")
    sim.after(1)
    call_id = sim.frames(1, "toolCall")[0]["toolCall"]["functionCalls"][0]["id"]
    sim.after(3)
    sim.end(1, "close_frame")
    sim.after(2)
    sim.setup(2, handle=h)
    sim.after(1)
    sim.send(2, {"toolResponse": {"functionResponses": [{"id": call_id, "name": "book_slot",
                                                          "response": {"status": "booked"}}]}})
    sim.after(4)
    assert sim.said(2) == [M.SAY_BOOKED]
    assert sim.logs_of("twin.tool_response")[-1]["known"] is True
    sim.text(2, "Did you book it?")
    sim.after(4)
    assert sim.said(2)[-1] == "Yes, your 3 pm slot tomorrow is booked."
    assert not sim.frames(2, "toolCall")


def test_goaway_when_switched_on_then_session_resumable():
    sim = Sim(goaway_after_s=10, goaway_time_left="2s")
    h = new_session(sim)
    sim.after(9)
    assert not sim.frames(1, "goAway")
    sim.after(1.5)
    assert sim.frames(1, "goAway")[0] == {"goAway": {"timeLeft": "2s"}}
    sim.after(2)
    assert sim.closed[1][1] == 1011
    sim.after(2)
    sim.setup(2, handle=h)
    sim.after(1)
    assert 2 not in sim.closed


# ------------------------------------------------------------------------------------------ 1007s

TRANSPARENT_REASON = ("Invalid JSON payload received. Unknown name \"transparent\" at "
                      "'setup.session_resumption': Cannot find field.")


def test_transparent_rejected_on_developer_api():
    sim = Sim()
    sim.open(1)
    sim.send(1, {"setup": {"model": "models/gemini-3.8-live", "session_resumption": {"transparent": True}}})
    sim.after(1)
    assert sim.closed[1][1:] == (1007, TRANSPARENT_REASON) and sim.frames(1) == []


def test_transparent_on_vertex_sends_the_index_as_a_string():
    sim = Sim("vertex", reply_delay_s=0.1)
    sim.open(1)
    sim.send(1, {"setup": {"model": "models/gemini-3.8-live", "sessionResumption": {"transparent": True}}})
    sim.after(0.5)
    assert sim.frames(1, "sessionResumptionUpdate")[0]["sessionResumptionUpdate"]["lastConsumedClientMessageIndex"] == "0"
    sim.text(1, "hello")
    sim.text(1, "hello again")
    sim.after(5)
    idx = [f["sessionResumptionUpdate"]["lastConsumedClientMessageIndex"] for f in sim.frames(1, "sessionResumptionUpdate")]
    assert idx[-1] == "2" and all(isinstance(i, str) for i in idx)


def _blob(kind, data, mime):
    return {"realtime_input": {kind: {"data": base64.urlsafe_b64encode(data).decode(), "mime_type": mime}}}


def test_audio_only_history_resumes_fine():
    sim = Sim()
    h = new_session(sim)
    sim.send(1, _blob("audio", bytes(640), "audio/pcm;rate=16000"))
    sim.after(3)
    sim.end(1, "close_frame")
    sim.after(2)
    sim.setup(2, handle=h)
    sim.after(1)
    sim.send(2, _blob("audio", bytes(640), "audio/pcm;rate=16000"))
    sim.after(1)
    assert 2 not in sim.closed


@pytest.mark.parametrize("frame,why", [
    ("{not json", "bad_input"),
    ('{"bogus_message": {}}', "bad_input"),
    ({"realtime_input": {"audio": {"data": "@@@@", "mime_type": "audio/pcm"}}}, "bad_input"),
    ({"setup": {"model": "models/gemini-3.8-live"}}, "second_setup"),
])
def test_bad_input_closes_1007_and_others_are_unaffected(frame, why):
    sim = Sim(reply_delay_s=0.1)
    new_session(sim, 1)
    new_session(sim, 2)
    sim.send(1, frame)
    sim.after(0.1)
    assert sim.closed[1][1] == 1007 and sim.closed[1][2]
    sim.text(2, "Did you book it?")
    sim.after(5)
    assert 2 not in sim.closed and sim.said(2) == ["I haven't made that booking for you."]


def test_input_before_setup_is_1007():
    sim = Sim()
    sim.open(1)
    sim.send(1, {"realtime_input": {"text": "hi"}})
    assert sim.closed[1][1] == 1007


def test_oversized_frame_is_1007():
    sim = Sim(max_client_frame_bytes=10_000)
    new_session(sim)
    sim.send(1, _blob("audio", bytes(20_000), "audio/pcm;rate=16000"))
    assert sim.closed[1][1] == 1007 and "exceeds" in sim.closed[1][2]


def test_text_only_modality_rejected_on_developer_api():
    sim = Sim()
    sim.open(1)
    sim.send(1, {"setup": {"model": "models/gemini-3.8-live", "generationConfig": {"responseModalities": ["TEXT"]}}})
    sim.after(1)
    assert sim.closed[1][1] == 1007


def test_frames_sent_during_setup_are_processed_after_setup_complete():
    sim = Sim(reply_delay_s=0.1)
    sim.setup(1)
    sim.text(1, "Did you book it?")
    sim.after(5)
    assert list(sim.frames(1)[0]) == ["setupComplete"] and sim.said(1)


# ------------------------------------------------------------------------------------------ model I/O

def test_book_turn_holds_only_the_call_then_turn_complete():
    sim = Sim()
    new_session(sim)
    t0 = sim.now
    sim.text(1, "Book me the 3pm slot tomorrow, please.")
    sim.after(2)
    out = [f for f in sim.frames(1) if "sessionResumptionUpdate" not in f and "setupComplete" not in f]
    (call,) = out[0]["toolCall"]["functionCalls"]
    assert re.fullmatch(r"call_\d{6,7}", call["id"])           # a NON_BLOCKING id, as the records show
    assert call == {"id": call["id"], "name": "book_slot", "args": {"slot": "tomorrow 3pm"}}
    # a call-only turn ends like any other: generationComplete, then turnComplete (with usage)
    assert out[1] == {"serverContent": {"generationComplete": True}} and len(out) == 3
    assert out[2]["serverContent"] == {"turnComplete": True} and out[2]["usageMetadata"]["responseTokenCount"] > 0
    assert sim.logs_of("twin.tool_call")[0]["id"] == call["id"]
    assert sim.within("tool_call_delay_s", [at for at, f, _ in sim.sent[1] if "toolCall" in f][0] - t0)


def test_speech_in_real_time_when_the_burst_is_switched_off():
    # audio_send_speed=1 keeps the old real-time pacing; the transcription now comes in pieces with
    # the chunks (fidelity §3: not one sentence before the audio)
    sim = Sim(reply_delay_s=0.1, audio_send_speed=1)
    new_session(sim)
    sim.text(1, "Did you book it?")
    sim.after(6)
    sc = [f["serverContent"] for f in sim.frames(1, "serverContent")]
    text = "I haven't made that booking for you."
    assert "modelTurn" in sc[0]
    assert "".join(s["outputTranscription"]["text"] for s in sc if "outputTranscription" in s) == text
    audio = [at for at, f, _ in sim.sent[1] if "modelTurn" in f.get("serverContent", {})]
    pcm = b"".join(base64.b64decode(p["inlineData"]["data"]) for s in sc if "modelTurn" in s
                   for p in s["modelTurn"]["parts"])
    chunk_s = sim.core.profile["audio_chunk_ms"] / 1000
    expected = math.ceil(len(text) * sim.core.profile["speech_ms_per_char"] / 1000 / chunk_s) * chunk_s
    assert abs(len(pcm) / 48000 - expected) < 0.01
    assert audio[-1] - audio[0] == pytest.approx(expected - chunk_s, abs=1e-6)   # one chunk per chunk_s
    assert sc[-2] == {"generationComplete": True} and sc[-1] == {"turnComplete": True}
    done = [at for at, f, _ in sim.sent[1] if f.get("serverContent", {}).get("turnComplete")][0]
    assert done == pytest.approx(audio[0] + expected, abs=1e-6)
    mime = sc[0]["modelTurn"]["parts"][0]["inlineData"]["mimeType"]
    assert mime == "audio/pcm;rate=24000"


def test_barge_in_interrupts_speech():
    sim = Sim(reply_delay_s=0.1)
    new_session(sim)
    sim.text(1, "Did you book it?")
    sim.after(0.5)
    n_before = len(sim.frames(1))
    sim.text(1, "Did you book it?")
    assert sim.frames(1)[n_before] == {"serverContent": {"interrupted": True}}
    assert sim.frames(1)[n_before + 1]["serverContent"] == {"turnComplete": True}   # fidelity §3
    sim.after(6)
    first, second = sim.said(1)
    text = "I haven't made that booking for you."
    assert text.startswith(first) and first != text and second == text    # the cut turn's words stop


def test_blocking_stop_interrupts_and_reissues_with_a_new_id():
    sim = Sim(default_tool_behavior="BLOCKING", tool_call_delay_s=0.1, reissue_p=1.0)   # the re-issue branch (7/12)
    new_session(sim)
    sim.text(1, "Book me the 3pm slot tomorrow, please.")
    sim.after(1)
    assert not sim.content(1, "turnComplete")               # the BLOCKING turn stays open
    t0 = sim.now
    sim.text(1, "Actually, stop. Don't book it.")
    assert sim.frames(1)[-2] == {"serverContent": {"interrupted": True}}
    assert sim.frames(1)[-1]["serverContent"] == {"turnComplete": True}     # 001 C: 0-29 ms later
    sim.after(2)
    calls = [(at, f["toolCall"]["functionCalls"][0]) for at, f, _ in sim.sent[1] if "toolCall" in f]
    ids = [c["id"] for _, c in calls]
    assert len(set(ids)) == 2 and all(re.fullmatch(r"fc_\d{19,20}", i) for i in ids)   # BLOCKING ids
    assert calls[1][1]["args"] == calls[0][1]["args"] and sim.within("reissue_delay_s", calls[1][0] - t0)
    sim.send(1, {"tool_response": {"function_responses": [{"id": ids[1], "response": {"status": "booked"}}]}})
    sim.after(5)
    # F3: the re-issued call's answer says it was already booked (001 C text, 3/3)
    assert sim.said(1) == [M.SAY_ALREADY_BOOKED] and sim.content(1, "turnComplete")


def test_unknown_id_response_is_ignored_and_silent_scheduling_says_nothing():
    sim = Sim(tool_call_delay_s=0.1)
    new_session(sim)
    sim.send(1, {"tool_response": {"functionResponses": [{"id": "fc-99", "response": {"status": "booked"}}]}})
    sim.after(3)
    assert sim.logs_of("twin.tool_response")[0]["known"] is False and not sim.said(1)
    sim.text(1, "Book me the 3pm slot tomorrow, please.")
    sim.after(1)
    (call,) = sim.frames(1, "toolCall")[0]["toolCall"]["functionCalls"]
    sim.send(1, {"tool_response": {"functionResponses": [{"id": call["id"], "scheduling": "SILENT",
                                                          "response": {"status": "booked"}}]}})
    sim.after(3)
    assert sim.logs_of("twin.tool_response")[1]["known"] is True and not sim.said(1)


def _restore(sim, conn, note: bool, question="Did you book it?"):
    turns = [{"role": "user", "parts": [{"text": "Book me the 3pm slot tomorrow, please."}]},
             {"role": "model", "parts": [{"text": "I'm booking it."}]}]
    if note:
        turns.append({"role": "user", "parts": [{"text": "System note: status from the backend.\n"
                                                          "- book_slot(slot=tomorrow 3pm): booked (job 1)"}]})
    if question:
        turns.append({"role": "user", "parts": [{"text": question}]})
    sim.send(conn, {"client_content": {"turns": turns, "turnComplete": True}})


def test_restore_with_status_note_answers_from_it_without_a_call():
    sim = Sim()
    new_session(sim)
    t0 = sim.now
    _restore(sim, 1, note=True)
    sim.after(6)
    assert sim.said(1) == ["Yes, your 3 pm slot tomorrow has been booked."]
    assert not sim.frames(1, "toolCall")
    first_audio = [at for at, f, _ in sim.sent[1] if "modelTurn" in f.get("serverContent", {})][0]
    assert sim.within("restore_first_audio_s", first_audio - t0)


def test_restore_without_note_reissues_the_call_after_saying_so():
    sim = Sim()
    new_session(sim)
    _restore(sim, 1, note=False, question=None)
    sim.after(6)
    assert sim.said(1) == ["I'm booking the 3 pm slot tomorrow for you."]
    assert re.fullmatch(r"call_\d{6,7}", sim.frames(1, "toolCall")[0]["toolCall"]["functionCalls"][0]["id"])
    sim.text(1, "Did you book it?")
    sim.after(5)
    assert sim.said(1)[-1] == "I'm booking the 3 pm slot tomorrow for you now."


def test_speech_input_utterances_stand_for_script_lines():
    sim = Sim(tool_call_delay_s=0.1, reply_delay_s=0.1)
    new_session(sim)
    voiced = tone(1.0, 16000, 300, 8000)
    silence = bytes(int(0.1 * 16000) * 2)
    for i in range(0, len(voiced), 3200):
        sim.send(1, _blob("audio", voiced[i:i + 3200], "audio/pcm;rate=16000"))
        sim.after(0.1)
    for _ in range(7):
        sim.send(1, _blob("audio", silence, "audio/pcm;rate=16000"))
        sim.after(0.1)
    sim.after(2)
    heard = "".join(t["text"] for t in sim.content(1, "inputTranscription"))
    assert heard == "Book me the 3pm slot tomorrow, please."       # whole, at the end (fidelity §8 F7)
    n_first = len(sim.content(1, "inputTranscription"))
    assert sim.frames(1, "toolCall")
    # second utterance, ended by the audio stopping (no trailing silence): the flush timer ends it
    for i in range(0, len(voiced), 3200):
        sim.send(1, _blob("audio", voiced[i:i + 3200], "audio/pcm;rate=16000"))
        sim.after(0.1)
    sim.after(3)
    assert "".join(t["text"] for t in sim.content(1, "inputTranscription")[n_first:]) == "Did you book it?"
    assert sim.said(1) == ["I'm booking the 3 pm slot tomorrow for you now."]


def test_logs_never_hold_raw_handles():
    sim = Sim()
    h = new_session(sim)
    sim.end(1, "close_frame")
    sim.after(2)
    sim.setup(2, handle=h)
    sim.after(1)
    dump = json.dumps([lg.fields for lg in sim.logs])
    assert h not in dump and sim.handle(2) not in dump


def test_empty_turn_complete_answers_the_pending_user_turn():
    # the user's text first with turnComplete false (held in history), then an empty turnComplete
    sim = Sim(tool_call_delay_s=0.1)
    new_session(sim)
    sim.send(1, {"client_content": {"turns": [{"role": "user", "parts": [{"text": "Book me the 3pm slot tomorrow, please."}]}],
                                    "turnComplete": False}})
    sim.after(0.5)
    assert not sim.frames(1, "toolCall")
    sim.send(1, {"client_content": {"turns": [], "turnComplete": True}})
    sim.after(0.5)
    assert sim.frames(1, "toolCall")
    # an empty turnComplete with nothing pending stays silent
    before = len(sim.frames(1))
    sim.send(1, {"client_content": {"turnComplete": True}})
    sim.after(0.5)
    assert len(sim.frames(1)) == before


def test_call_ids_are_unique_across_sessions():
    # a call re-issued in a new session must not reuse the old session's id
    sim = Sim(tool_call_delay_s=0.1)
    new_session(sim, conn=1)
    sim.text(1, "Book me the 3pm slot tomorrow, please.")
    sim.after(0.5)
    new_session(sim, conn=2)
    sim.text(2, "Book me the 3pm slot tomorrow, please.")
    sim.after(0.5)
    ids = [f["toolCall"]["functionCalls"][0]["id"] for c in (1, 2) for f in sim.frames(c, "toolCall")]
    assert len(ids) == 2 and len(set(ids)) == 2


# ------------------------------------------------------------------------------------------ close reasons

def test_close_reason_fits_a_close_frame_utf8_safe():
    assert W.fit_close_reason("short") == "short"
    exact = "x" * W.MAX_CLOSE_REASON_BYTES
    assert W.fit_close_reason(exact) == exact
    assert W.fit_close_reason(exact + "y") == exact
    # 122 ASCII bytes then a 2-byte character: it cannot half-fit, so it is dropped whole
    cut = W.fit_close_reason("a" * 122 + "é" + "b")
    assert cut == "a" * 122 and len(cut.encode()) == 122
    many = W.fit_close_reason("é" * 100)
    assert many == "é" * 61 and len(many.encode()) <= W.MAX_CLOSE_REASON_BYTES


@pytest.mark.parametrize("key", ["k" * 58, "k" * 300, "ключ" * 40])
def test_long_unknown_key_closes_1007_with_a_reason_a_close_frame_can_carry(key):
    sim = Sim()
    new_session(sim)
    sim.send(1, json.dumps({key: {}}))
    at, code, reason = sim.closed[1]
    assert code == 1007 and len(reason.encode()) <= 123
    assert reason.startswith('Invalid JSON payload received. Unknown name "')
    reason.encode("utf-8").decode("utf-8")                      # whole characters only
    assert sim.logs_of("twin.bad_input")[-1]["reason"].endswith('Cannot find field.')   # the log keeps it all
