"""The OpenAI Realtime twin's sans-I/O core on a simulated clock: no sockets, no asyncio, no sleeping.

Every event it sends is also checked against the openai SDK's own pydantic type for that event
(strict validation, not the SDK's lenient construct), so a field the SDK requires cannot go missing.
"""
from __future__ import annotations

import heapq
import itertools
import json
import typing
from pathlib import Path

import pytest
from openai.types.realtime import RealtimeServerEvent

from lab.errors import LabError
from lab.twin import io_actions as A
from lab.twin import params as P
from lab.twin.core import TwinCore
from lab.twin.model import tone
from lab.twin.openai_core import OpenAICore
from lab.twin.openai_wire import KEY_MISSING, KEY_OK, KEY_WRONG, check_upgrade
from lab.twin.profile import load_profile

RESERVATION = str(Path(__file__).resolve().parents[2] / "lab" / "conversations" / "reservation.yaml")
TOOLS = [{"type": "function", "name": n, "description": d, "parameters": {"type": "object", "properties": {}}}
         for n, d in (("check_slot", "Check whether a table is free"), ("reserve_table", "Reserve a table"))]
ASK = "Is there a table free for 6 people on 2026-12-31 at 8pm?"


def _sdk_types() -> dict[str, type]:
    union = typing.get_args(RealtimeServerEvent)[0]
    return {typing.get_args(cls.model_fields["type"].annotation)[0]: cls for cls in typing.get_args(union)}


SDK_TYPES = _sdk_types()


class Sim:
    """Runs an OpenAICore: a heap of timers on a simulated clock, every sent event kept per connection."""

    def __init__(self, conversation=RESERVATION, api_key=None, **overrides):
        self.core = OpenAICore("openai-realtime", overrides or None, seed=3, api_key=api_key,
                               conversation=conversation)
        self.now = 0.0
        self.heap: list = []
        self.seq = itertools.count()
        self.sent: dict[int, list[dict]] = {}
        self.closes: dict[int, tuple[int, str]] = {}
        self.logs: list[A.Log] = []

    def _take(self, acts):
        for a in acts:
            if isinstance(a, A.Send):
                assert json.loads(a.data) == a.frame
                SDK_TYPES[a.frame["type"]].model_validate(a.frame)     # the SDK's own type, strictly
                self.sent.setdefault(a.conn, []).append(a.frame)
            elif isinstance(a, A.Close):
                self.closes[a.conn] = (a.code, a.reason)
            elif isinstance(a, A.Timer):
                heapq.heappush(self.heap, (a.at, next(self.seq), a.key))
            else:
                self.logs.append(a)

    def open(self, conn=1, key=""):
        self._take(self.core.connection_opened(conn, self.now, "v1/realtime?model=gpt-realtime", "127.0.0.1:1", key))

    def send(self, conn, event: dict):
        self._take(self.core.frame_received(conn, json.dumps(event), self.now))

    def end(self, conn):
        self._take(self.core.connection_ended(conn, "close_frame", self.now))

    def run(self, until: float):
        while self.heap and self.heap[0][0] <= until:
            at, _, key = heapq.heappop(self.heap)
            self.now = max(self.now, at)
            self._take(self.core.timer_fired(key, self.now))
        self.now = max(self.now, until)

    def types(self, conn=1) -> list[str]:
        return [f["type"] for f in self.sent.get(conn, [])]

    def of(self, kind: str, conn=1) -> list[dict]:
        return [f for f in self.sent.get(conn, []) if f["type"] == kind]


def _configured(sim: Sim, conn=1, **session):
    sim.open(conn)
    sim.send(conn, {"type": "session.update", "session": {"type": "realtime", "tools": TOOLS, **session}})


def _say(sim: Sim, text: str, conn=1):
    sim.send(conn, {"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}})


def _called(sim: Sim, conn=1) -> str:
    """A configured session asked the reservation line: the call_id of the check_slot call it got."""
    _configured(sim, conn)
    _say(sim, ASK, conn)
    sim.send(conn, {"type": "response.create"})
    sim.run(sim.now + 5)
    return sim.of("response.function_call_arguments.done", conn)[0]["call_id"]


def _answer(sim: Sim, call_id: str, conn=1, **event):
    sim.send(conn, {"type": "conversation.item.create", **event, "item": {
        "type": "function_call_output", "call_id": call_id, "output": json.dumps({"status": "free"})}})


# ---------------------------------------------------------------------------------------- the upgrade

def test_the_route_is_v1_realtime_and_the_key_is_a_bearer_token_judged_on_the_socket():
    assert check_upgrade("/v1/realtime/x", {}, "k").status == 404
    assert check_upgrade("/ws/google.ai.generativelanguage.v1.GenerativeService.BidiGenerateContent", {}, "k").status == 404
    ok = check_upgrade("/v1/realtime?model=gpt-realtime", {"Authorization": "Bearer k"}, "k")
    assert (ok.status, ok.route, ok.key) == (None, "v1/realtime?model=gpt-realtime", KEY_OK)
    # a bad key is not refused at the upgrade: the service answers it on the socket
    assert check_upgrade("/v1/realtime?model=m", {"Authorization": "Bearer nope"}, "k").key == KEY_WRONG
    assert check_upgrade("/v1/realtime?model=m", {}, "k").key == KEY_MISSING
    assert check_upgrade("/v1/realtime?model=m", {"x-goog-api-key": "k"}, "k").key == KEY_MISSING


def test_a_wrong_key_gets_the_invalid_api_key_error_then_close_3000_and_no_session():
    sim = Sim()
    sim.open(1, key=KEY_WRONG)
    assert sim.types() == ["error"]
    err = sim.of("error")[0]["error"]
    assert (err["type"], err["code"]) == ("invalid_request_error", "invalid_api_key")
    assert sim.closes[1] == (3000, "invalid_request_error.invalid_api_key")


# ---------------------------------------------------------------------------------------- the session

def test_session_created_first_and_a_new_socket_is_a_new_empty_session():
    sim = Sim()
    _configured(sim, 1)
    sim.open(2)
    first, second = sim.of("session.created", 1)[0]["session"], sim.of("session.created", 2)[0]["session"]
    assert sim.types(1)[:2] == ["session.created", "session.updated"]
    assert first["id"].startswith("sess_") and first["id"] != second["id"]
    assert first["model"] == "gpt-realtime" and first["type"] == "realtime"
    assert second["tools"] == []                       # nothing of session 1 carried over
    assert sim.of("session.updated", 1)[0]["session"]["tools"] == TOOLS


def test_session_update_merges_nested_audio_and_needs_the_ga_session_type():
    sim = Sim()
    sim.open()
    sim.send(1, {"type": "session.update", "event_id": "ev1", "session": {"instructions": "x"}})
    err = sim.of("error")[0]["error"]
    assert (err["code"], err["param"], err["event_id"]) == ("missing_required_parameter", "session.type", "ev1")
    sim.send(1, {"type": "session.update", "session": {"type": "realtime", "audio": {"output": {"voice": "marin"}}}})
    audio = sim.of("session.updated")[0]["session"]["audio"]
    assert audio["output"]["voice"] == "marin" and audio["output"]["format"]["rate"] == 24000
    assert audio["input"]["turn_detection"]["type"] == "server_vad"       # untouched by the update
    assert 1 not in sim.closes                                            # errors leave the session open


def test_a_bad_event_is_an_error_event_naming_it_and_the_session_stays_open():
    sim = Sim()
    sim.open()
    sim.send(1, {"type": "response.text.delta", "event_id": "ev9"})       # a Beta/server name from a client
    sim._take(sim.core.frame_received(1, "{not json", sim.now))
    sim.send(1, {"no": "type"})
    codes = [(e["error"]["code"], e["error"]["param"]) for e in sim.of("error")]
    assert codes == [("invalid_value", "type"), ("invalid_json", None), ("missing_required_parameter", "type")]
    assert sim.of("error")[0]["error"]["event_id"] == "ev9" and 1 not in sim.closes
    assert any(log.kind == "twin.error_event" for log in sim.logs)


# ---------------------------------------------------------------------------------------- tools

def test_a_text_turn_gets_a_function_call_with_arguments_read_from_the_line():
    sim = Sim()
    _configured(sim)
    _say(sim, ASK)
    assert sim.types()[-2:] == ["conversation.item.added", "conversation.item.done"]   # GA, not .created
    assert "response.created" not in sim.types()                         # a text item alone asks nothing
    sim.send(1, {"type": "response.create"})
    assert sim.types()[-2:] == ["response.created", "rate_limits.updated"]
    sim.run(5)
    done = sim.of("response.function_call_arguments.done")[0]
    assert done["name"] == "check_slot" and done["call_id"].startswith("call_")
    assert json.loads(done["arguments"]) == {"date": "2026-12-31", "time": "8pm", "party": 6}
    assert sim.of("response.function_call_arguments.delta")[0]["delta"] == done["arguments"]
    assert sim.types()[-1] == "response.done"
    resp = sim.of("response.done")[0]["response"]
    assert resp["status"] == "completed" and resp["output"][0]["call_id"] == done["call_id"]


def test_no_auto_continue_after_a_tool_output_the_reply_comes_on_response_create():
    sim = Sim()
    _answer(sim, _called(sim))
    sim.run(30)
    assert len(sim.of("response.created")) == 1                           # nothing until asked
    sim.send(1, {"type": "response.create"})
    sim.run(60)
    said = sim.of("response.output_audio_transcript.done")[-1]["transcript"]
    assert said == "A table for 6 on 2026-12-31 at 8pm is free."
    deltas = "".join(d["delta"] for d in sim.of("response.output_audio_transcript.delta"))
    assert deltas == said and sim.of("response.output_audio.delta")
    assert sim.types()[-1] == "response.done"


def test_the_auto_continue_parameter_makes_a_tool_output_start_the_reply():
    sim = Sim(openai_auto_response_after_tool_output=True)
    _answer(sim, _called(sim))
    assert len(sim.of("response.created")) == 2


def test_a_tool_output_into_a_new_session_is_an_orphan_error():
    sim = Sim()
    call_id = _called(sim, 1)
    sim.end(1)                                                            # the socket drops
    _configured(sim, 2)                                                   # the reconnect: a new session
    _answer(sim, call_id, 2, event_id="ev_out")
    err = sim.of("error", 2)[0]["error"]
    assert (err["code"], err["param"], err["event_id"]) == ("invalid_value", "item.call_id", "ev_out")
    assert call_id in err["message"]
    assert "conversation.item.added" not in sim.types(2) and 2 not in sim.closes
    logged = [log.fields for log in sim.logs if log.kind == "twin.tool_response"]
    assert logged[-1]["known"] is False and logged[-1]["id"] == call_id


def test_with_the_call_id_check_off_an_orphan_output_is_accepted():
    sim = Sim(openai_check_call_id=False)
    _configured(sim)
    sim.send(1, {"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "call_elsewhere", "output": "{}"}})
    assert sim.types()[-2:] == ["conversation.item.added", "conversation.item.done"]


# ---------------------------------------------------------------------------------------- responses

def test_one_response_at_a_time_and_cancel_needs_an_active_one():
    sim = Sim()
    _configured(sim)
    sim.send(1, {"type": "response.cancel", "event_id": "c0"})
    assert sim.of("error")[0]["error"]["code"] == "response_cancel_not_active"
    _say(sim, ASK)
    sim.send(1, {"type": "response.create"})
    sim.send(1, {"type": "response.create"})
    assert sim.of("error")[1]["error"]["code"] == "conversation_already_has_active_response"
    sim.send(1, {"type": "response.cancel"})
    done = sim.of("response.done")[0]["response"]
    assert done["status"] == "cancelled" and done["status_details"]["reason"] == "client_cancelled"
    sim.run(10)                                                           # the cancelled step's timer is stale
    assert not sim.of("response.function_call_arguments.done")


def test_text_modality_sends_output_text_not_audio():
    sim = Sim()
    _configured(sim, output_modalities=["text"])
    _say(sim, "Hi, can you hear me?")
    sim.send(1, {"type": "response.create"})
    sim.run(5)
    assert sim.of("response.output_text.done")[0]["text"] == "Yes, I can hear you clearly."
    assert not sim.of("response.output_audio.delta")


# ---------------------------------------------------------------------------------------- audio and VAD

def _pcm(loud_s: float, quiet_s: float) -> bytes:
    return tone(loud_s, 24000, 300.0, 8000) + b"\x00\x00" * int(quiet_s * 24000)


def _append(sim: Sim, pcm: bytes, conn=1):
    import base64
    for i in range(0, len(pcm), 4800):                                    # 100 ms chunks
        sim.send(conn, {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm[i:i + 4800]).decode()})


def test_server_vad_speech_becomes_a_committed_item_and_a_response():
    sim = Sim()
    _configured(sim)
    _append(sim, _pcm(1.0, 0.8))
    t = sim.types()
    order = [t.index(k) for k in ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                                  "input_audio_buffer.committed", "response.created")]
    assert order == sorted(order)
    started, stopped = sim.of("input_audio_buffer.speech_started")[0], sim.of("input_audio_buffer.speech_stopped")[0]
    assert started["item_id"] == stopped["item_id"] == sim.of("input_audio_buffer.committed")[0]["item_id"]
    assert 0 <= started["audio_start_ms"] < stopped["audio_end_ms"] <= 1800
    # speech is not transcribed: the utterance stands for the first spoken line (the profile's
    # script, as for the Gemini twin; `lab run` puts the scenario's lines there)
    said = [log.fields for log in sim.logs if log.kind == "twin.model"][-1]
    assert said["source"] == "audio" and said["text"] == sim.core.profile["script"][0]


def test_speech_during_a_response_cancels_it_as_turn_detected():
    sim = Sim()
    _configured(sim)
    _say(sim, ASK)
    sim.send(1, {"type": "response.create"})
    _append(sim, _pcm(0.5, 0.0))
    done = sim.of("response.done")[0]["response"]
    assert done["status"] == "cancelled" and done["status_details"]["reason"] == "turn_detected"


def test_commit_of_an_empty_buffer_is_an_error_and_clear_is_acknowledged():
    sim = Sim()
    _configured(sim, audio={"input": {"turn_detection": None}})
    sim.send(1, {"type": "input_audio_buffer.commit"})
    assert sim.of("error")[0]["error"]["code"] == "input_audio_buffer_commit_empty"
    _append(sim, _pcm(0.3, 0.0))
    assert "input_audio_buffer.speech_started" not in sim.types()        # no VAD when turn_detection is null
    sim.send(1, {"type": "input_audio_buffer.commit"})
    assert sim.types()[-3:] == ["input_audio_buffer.committed", "conversation.item.added", "conversation.item.done"]
    assert "response.created" not in sim.types()                         # a manual commit asks nothing
    sim.send(1, {"type": "input_audio_buffer.clear"})
    assert sim.types()[-1] == "input_audio_buffer.cleared"


# ---------------------------------------------------------------------------------------- the session cap

def test_the_session_cap_is_an_error_session_expired_then_close_1001():
    sim = Sim(openai_session_max_s=120)
    _configured(sim)
    sim.run(119.9)
    assert 1 not in sim.closes
    sim.run(120.0)
    err = sim.of("error")[-1]["error"]
    assert err["code"] == "session_expired"
    assert err["message"] == "Your session hit the maximum duration of 2 minutes."
    assert sim.closes[1] == (1001, err["message"])
    sim.send(1, {"type": "response.create"})                              # closing: nothing more is answered
    assert sim.types()[-1] == "error"


def test_a_server_close_is_recorded_as_the_servers_own_end():
    # the report tells the server's ends from the client's by twin.conn.end's how (rules.CLIENT_ENDS)
    sim = Sim(openai_session_max_s=10)
    _configured(sim)
    sim.run(10.0)
    sim.end(1)
    assert [e.fields["how"] for e in sim.logs if e.kind == "twin.conn.end"] == ["server_session_cap"]
    _configured(sim, conn=2)
    sim.end(2)                                                            # the client's own close stays its own
    assert [e.fields["how"] for e in sim.logs if e.kind == "twin.conn.end"][-1] == "close_frame"


def test_server_error_fails_every_open_session_with_an_error_naming_it_then_close_1011():
    sim = Sim()
    _configured(sim, conn=1)
    _configured(sim, conn=2)
    sid = sim.of("session.created", conn=2)[0]["session"]["id"]
    sim.end(1)
    sim._take(sim.core.set_fault("server_error", True, sim.now))
    assert 1 not in sim.closes                                            # an ended session is left alone
    err = sim.of("error", conn=2)[-1]["error"]                            # the SDK's own RealtimeErrorEvent type
    assert err["type"] == "server_error" and err["code"] is None and sid in err["message"]
    assert sim.closes[2] == (1011, "server_error")
    sim.end(2)
    assert [e.fields["how"] for e in sim.logs if e.kind == "twin.conn.end"][-1] == "server_error"
    assert sim.core.set_fault("server_error", False, sim.now)[0].kind == "twin.fault"   # nothing to switch off
    with pytest.raises(LabError, match="known: server_error, slow_pongs, stall"):
        sim.core.set_fault("quota", True, sim.now)


def test_the_default_cap_is_sixty_minutes():
    sim = Sim()
    _configured(sim)
    sim.run(3599)
    assert 1 not in sim.closes
    sim.run(3600)
    assert sim.closes[1][0] == 1001 and "60 minutes" in sim.closes[1][1]


# ---------------------------------------------------------------------------------------- the profile

def test_the_openai_profile_carries_its_protocols_names_each_with_a_source():
    prof = load_profile("openai-realtime", protocol=None)
    assert prof.protocol == P.OPENAI and list(prof.params) == P.declared_for(P.OPENAI)
    assert all(p.source.strip() for p in prof.params.values())
    assert "md L34" in prof.source("openai_session_max_s")
    # a Gemini figure shared with OpenAI is inherited, and says it is an assumption here
    assert prof.source("tool_call_delay_s").startswith("assumption: developer-api's value")
    assert "refuse_close_s" not in prof.params                           # Gemini's resumption is not OpenAI's
    assert P.SHARED <= set(P.declared_for(P.GEMINI))


def test_each_core_refuses_the_other_protocols_profile_in_one_line():
    with pytest.raises(LabError, match="openai protocol, not gemini"):
        TwinCore("openai-realtime")
    with pytest.raises(LabError, match="gemini protocol, not openai"):
        OpenAICore("developer-api")
    with pytest.raises(LabError, match="not one of the openai protocol"):
        OpenAICore("openai-realtime", {"refuse_close_s": 1})


def test_twin_serve_protocol_openai_lists_the_openai_profile_and_refuses_a_mismatch(capsys):
    from lab.cli import main

    assert main(["twin", "serve", "--protocol", "openai", "--list-params", "--set", "openai_session_max_s=90"]) == 0
    out = capsys.readouterr().out
    assert "openai_session_max_s = 90\n    source: override" in out and "refuse_close_s" not in out
    assert main(["twin", "serve", "--profile", "openai-realtime", "--list-params"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "openai protocol, not gemini" in err


def test_the_record_says_what_the_client_sent_but_not_each_audio_chunk():
    sim = Sim()
    call_id = _called(sim)
    _answer(sim, call_id)
    sim.send(1, {"type": "input_audio_buffer.append", "audio": ""})
    sim.send(1, {"type": "response.create"})
    sim.send(1, {"type": "no.such_event"})
    got = [{k: v for k, v in log.fields.items() if k not in ("conn", "session")}
           for log in sim.logs if log.kind == "twin.client_event"]
    assert got == [{"type": "session.update", "tools": ["check_slot", "reserve_table"]},
                   {"type": "conversation.item.create", "item": "message", "role": "user"},
                   {"type": "response.create"},
                   {"type": "conversation.item.create", "item": "function_call_output", "call_id": call_id},
                   {"type": "response.create"}]


def test_response_create_metadata_is_echoed_on_the_response_a_client_matches_by_it():
    sim = Sim()
    _configured(sim)
    _say(sim, ASK)
    sim.send(1, {"type": "response.create", "response": {"metadata": {"client_event_id": "response_create_x1"}}})
    sim.run(sim.now + 5)
    created, done = sim.of("response.created")[0], sim.of("response.done")[0]
    assert created["response"]["metadata"] == done["response"]["metadata"] == {"client_event_id": "response_create_x1"}
    sim.send(1, {"type": "response.create"})
    sim.run(sim.now + 5)
    assert sim.of("response.created")[1]["response"]["metadata"] is None


def test_a_call_and_its_output_replayed_into_a_new_session_are_known_there():
    """A client that restores its history into the new session (the call item, then its output)
    is answered from it: no orphan error, and the model knows the booking was made."""
    sim = Sim(conversation=None)
    sim.open(1)
    sim.send(1, {"type": "session.update", "session": {"type": "realtime", "tools": [
        {"type": "function", "name": "book_slot", "description": "Book the given appointment slot",
         "parameters": {"type": "object", "properties": {"slot": {"type": "string"}}}}]}})
    _say(sim, "Book me the 3pm slot tomorrow, please.")
    sim.send(1, {"type": "conversation.item.create", "item": {
        "type": "function_call", "call_id": "call_old", "name": "book_slot", "arguments": '{"slot":"tomorrow 3pm"}'}})
    sim.send(1, {"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "call_old", "output": json.dumps({"status": "booked"})}})
    assert not sim.of("error")
    answered = [log.fields for log in sim.logs if log.kind == "twin.tool_response"]
    assert (answered[-1]["known"], answered[-1]["name"], answered[-1]["status"]) == (True, "book_slot", "booked")
    assert answered[-1]["history"] is True          # a replay, not a second answer to an issued call
    # the user's request was answered by the call written after it: asked now, the model answers the output
    sim.send(1, {"type": "response.create"})
    sim.run(sim.now + 5)
    assert not [log for log in sim.logs if log.kind == "twin.model"]
    assert sim.of("response.output_audio_transcript.done")[-1]["transcript"] == "I'm booking the 3 pm slot tomorrow for you."
    _say(sim, "Did you book it?")
    sim.send(1, {"type": "response.create"})
    sim.run(sim.now + 5)
    assert [log.fields["plan"] for log in sim.logs if log.kind == "twin.model"] == ["status-booked"]


# ---------------------------------------------------------------------------------------- a restore

def test_a_status_note_a_client_writes_into_a_new_session_is_read_not_answered_as_a_user_turn():
    sim = Sim(conversation="booking")
    _configured(sim, tools=[{"type": "function", "name": "book_slot", "description": "Book a slot",
                             "parameters": {"type": "object", "properties": {"slot": {"type": "string"}}}}])
    sim.send(1, {"type": "conversation.item.create", "item": {"type": "message", "role": "system", "content": [
        {"type": "input_text", "text": "System note: book_slot(slot='tomorrow 3pm') -> booked (job j1)"}]}})
    assert "response.created" not in sim.types()          # a note asks nothing by itself
    restore = [x.fields for x in sim.logs if x.kind == "twin.restore"]
    assert len(restore) == 1 and restore[0]["note"] is not None
    _say(sim, "Did you book it?")
    sim.send(1, {"type": "response.create"})
    sim.run(sim.now + 10)
    said = " ".join(d["delta"] for d in sim.of("response.output_audio_transcript.delta"))
    assert "book" in said.lower() and not sim.of("response.function_call_arguments.done")   # answered from the note
    assert [x.fields["source"] for x in sim.logs if x.kind == "twin.user"] == ["text"]      # one user turn
