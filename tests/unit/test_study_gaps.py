"""Cases seed 000 lists as not tested. Speech spoken during the gap: the recovery client's replay of
a line cut by a loss (fake connections) and the metrics that say what of it reached the twin. The
path back after the server's own close: when that late close reached the client."""
import asyncio
import dataclasses

from lab.backend import Backend
from lab.clients import get
from lab.clients.base import ClientContext, Endpoint
from lab.events import Event, EventLog
from lab.report.metrics import compute, gap_speech_metrics

CHUNK = b"\x01\x00" * 1600          # 100 ms of 16 kHz audio
LINE = CHUNK * 6                    # a 0.6 s line


@dataclasses.dataclass
class AudioConn:
    """A connection that counts the audio chunks handed to it (the SDK session is itself)."""
    n: int
    session_no: int
    usable: bool = True
    closed: bool = False
    lost: bool = False
    chunks: int = 0

    async def send_realtime_input(self, audio=None, **kw):
        self.chunks += 1

    async def send(self, fn):
        await fn(self)
        return True


def _client(**params):
    log = EventLog()
    ctx = ClientContext(endpoint=Endpoint(base_url="https://127.0.0.1:9", api_key="test"), log=log,
                        backend=Backend(log), params=params, speech=True)
    return get("recovery")(ctx), log


async def _cut_and_recover(cl, old, new, lost_at_s=0.25, back_at_s=0.4):
    """Connection `old` is found lost `lost_at_s` into the line; `new` is adopted at `back_at_s`."""
    await asyncio.sleep(lost_at_s)
    old.lost, old.usable = True, False
    cl.ready.clear()
    await asyncio.sleep(back_at_s - lost_at_s)
    cl._adopt(new)


def _speak_through_a_loss(new_session_no, **params):
    async def main():
        cl, log = _client(**params)
        old, new = AudioConn(1, 1), AudioConn(2, new_session_no)
        cl._adopt(old)
        said, _ = await asyncio.gather(cl._speak(LINE, old, 1), _cut_and_recover(cl, old, new))
        return said, old.chunks, new.chunks, [(e["how"], e["conn"]) for e in log.find("user.replay")]
    return asyncio.run(main())


def test_a_line_cut_by_a_loss_is_spoken_again_whole_on_the_resumed_session():
    said, on_old, on_new, replays = _speak_through_a_loss(new_session_no=1)
    assert said is True
    assert 1 <= on_old < 6              # the line stopped at the loss
    assert on_new == 6                  # and was spoken again from its start
    assert replays == [("audio", 2)]


def test_a_new_session_gets_the_cut_line_from_its_restore_not_as_audio():
    said, on_old, on_new, replays = _speak_through_a_loss(new_session_no=2)
    assert said is False and on_new == 0 and replays == [("restore", 2)]


def test_without_the_buffer_the_rest_of_the_line_lands_mid_utterance_on_the_next_session():
    said, on_old, on_new, replays = _speak_through_a_loss(new_session_no=1, replay_gap_speech=False)
    assert replays == [] and on_old + on_new == 6 and 0 < on_new < 6


def _ev(kind, ms, src="client", **data):
    return Event(kind, 1000.0 + ms / 1000, ms, src, data)


def test_the_metrics_count_what_the_twin_heard_and_what_the_client_replayed():
    events = [_ev("user.say", 100, conn=1, text="a", line=0, mode="speech"),
              _ev("user.say", 900, conn=1, text="b", line=1, mode="speech"),
              _ev("user.replay", 1500, conn=2, line=1, how="audio")]
    twin = [_ev("twin.vad", 600, "twin", conn=1, session="s1", event="onset"),
            _ev("twin.vad", 800, "twin", conn=1, session="s1", event="end", line=0, heard_ms=1300.0),
            _ev("twin.vad", 2900, "twin", conn=2, session="s1", event="end", line=1, heard_ms=1400.0)]
    m = gap_speech_metrics(events, twin)
    assert m == {"speech_lines": 2, "utterances_heard": 2, "last_utterance_heard_ms": 1400.0,
                 "speech_replayed": 1, "speech_restored_as_text": 0}
    assert gap_speech_metrics(events[:1], None)["utterances_heard"] is None


def test_a_question_answered_twice_is_counted_from_what_the_user_heard():
    q = "Did you book it? I need to know now."
    events = [_ev("run.start", 0, "agent"), _ev("user.say", 1000, conn=1, text=q, line=1, mode="speech"),
              _ev("user.heard", 3000, conn=2, text="Yes, your 3 pm slot tomorrow has been booked."),
              _ev("user.heard", 9000, conn=2, text="Your 3 pm slot tomorrow is already booked."),
              _ev("run.end", 12000, "agent", status="ok")]
    assert compute(events)["answers_heard"] == 2
    assert compute(events[:3] + events[4:])["answers_heard"] == 1


def test_the_servers_late_close_of_the_lost_connection_is_timed_from_the_loss():
    events = [_ev("run.start", 0, "agent"), _ev("conn.open", 10, conn=1, purpose="initial"),
              _ev("conn.setup_complete", 20, conn=1), _ev("loss", 1000, "agent", how="fault", cuts_path=True),
              _ev("conn.closed", 5000, conn=2, code=1011, by="server"),
              _ev("conn.closed", 54000, conn=1, code=1011, by="server"), _ev("run.end", 60000, "agent", status="ok")]
    assert compute(events)["lost_conn_server_close_ms"] == 53000
    assert compute(events[:5] + events[6:])["lost_conn_server_close_ms"] is None
