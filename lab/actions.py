"""The actions a timeline step may script: each defined once, with who performs it.

- `client`: the client under test does it (`await client.action(name)`): drop, close, resume.
- `proxy`: the freeze proxy does it (a POST to its control API, `verb`); needs `endpoint: {via: proxy}`.
- `network`: the client's access network does it (the agent, in the client's namespace, through
  lab.topology.router: `body` says to which link and the overlap); needs a router scenario.
- `twin`: the endpoint twin does it (a POST to its control channel, lab.twin.control: `verb` is the
  route, `body` the JSON it takes): goAway now, or one of the server's own faults switched.

`protocols` are the realtime protocols that have it (lab.protocols): a resume with a handle, the
camera and audioStreamEnd, goAway and the resumption/quota faults are the Live API's; a step of an
action its run's protocol lacks is not played (`lab.scenario.Step.plays_in`), and the scenario says so.

`cuts_path` marks an action that ends the client's path to the server, `heals_path` one that gives
it back (the report reads it as it reads a fault's heal). The agent writes the run's
`loss` event at the first such action unless a fault came first (lab.anchors); the others (resume,
unfreeze, ...) never make a loss. Fault and heal steps are not actions: the agent applies them itself.
"""
from __future__ import annotations

from dataclasses import dataclass

from lab.protocols import GEMINI, OPENAI, PROTOCOLS

CLIENT, PROXY, TWIN, NETWORK = "client", "proxy", "twin", "network"


@dataclass(frozen=True)
class Action:
    name: str
    by: str                     # CLIENT, PROXY, TWIN or NETWORK
    cuts_path: bool
    description: str
    verb: str | None = None     # the proxy's control verb, or the twin's control route
    body: tuple = ()            # twin actions: the request's JSON fields, as (name, value) pairs
    protocols: tuple[str, ...] = PROTOCOLS     # the protocols that have it
    heals_path: bool = False    # it gives the cut path back (the proxy forwards the frozen connection again)

    def request_body(self) -> dict:
        return dict(self.body)


ACTIONS: dict[str, Action] = {a.name: a for a in (
    Action("abort", CLIENT, True, "the client drops its connection without a close frame (the server sees a RST)"),
    Action("close", CLIENT, True, "the client closes its connection cleanly (close 1000) and waits for the echo"),
    Action("resume", CLIENT, False, "the client makes one resume attempt with its last handle", protocols=(GEMINI,)),
    Action("reuse_old", CLIENT, False, "the client sends on the old connection again (after an unfreeze)",
           protocols=(GEMINI,)),
    Action("start_video", CLIENT, False, "the client's camera starts: a JPEG frame every 1/video_fps s "
           "as realtimeInput.video (lab.clients.video)", protocols=(GEMINI,)),
    Action("stop_video", CLIENT, False, "the client's camera stops (002: video off before the reconnect)",
           protocols=(GEMINI,)),
    Action("audio_stream_end", CLIENT, False, "the client sends realtimeInput.audioStreamEnd (002: before "
           "closing the old session)", protocols=(GEMINI,)),
    Action("freeze", PROXY, True, "the proxy stops forwarding the first connection's bytes; its TCP stays up",
           verb="freeze"),
    Action("unfreeze", PROXY, False, "the proxy forwards the frozen connection again", verb="unfreeze",
           heals_path=True),
    Action("proxy_close", PROXY, False, "the proxy closes the frozen tunnel's sockets", verb="close"),
    Action("goaway", TWIN, False, "the twin sends goAway now (timeLeft: its goaway_lead_s), then closes "
           "when it runs out", verb="goaway", protocols=(GEMINI,)),
    Action("slow_pongs", TWIN, False, "the twin holds every pong for its pong_delay_s (8-30 s)", verb="fault",
           body=(("name", "slow_pongs"), ("on", True))),
    Action("fast_pongs", TWIN, False, "the twin answers pings at once again", verb="fault",
           body=(("name", "slow_pongs"), ("on", False))),
    Action("stall", TWIN, False, "the twin stops sending frames (pongs included); sockets stay open",
           verb="fault", body=(("name", "stall"), ("on", True))),
    Action("unstall", TWIN, False, "the twin sends frames again", verb="fault", body=(("name", "stall"), ("on", False))),
    Action("unresumable", TWIN, False, "the twin's sessionResumptionUpdates say resumable: false", verb="fault",
           body=(("name", "unresumable"), ("on", True)), protocols=(GEMINI,)),
    Action("quota_out", TWIN, False, "the twin closes every new setup 1011 with the quota reason", verb="fault",
           body=(("name", "quota"), ("on", True)), protocols=(GEMINI,)),
    # the OpenAI twin's own failure: an `error` server_error then a close 1011 on every session (the
    # Live API's server closes are the twin's timers and goAway; docs/protocol-openai.md)
    Action("server_error", TWIN, True, "the twin fails every open session: an error of type server_error, "
           "then a close 1011", verb="fault", body=(("name", "server_error"), ("on", True)), protocols=(OPENAI,)),
    # a phone leaving Wi-Fi for cellular: the old address is withdrawn, its flow dies silently
    Action("switch_to_cell", NETWORK, True, "the client moves from wifi to cell, break-before-make: wifi and "
           "its address go, then cell comes up", body=(("to", "cell"), ("overlap_s", 0.0))),
    Action("switch_to_cell_overlap", NETWORK, True, "the client moves from wifi to cell, make-before-break: "
           "new connections leave by cell at once, wifi and its flows go 2 s later",
           body=(("to", "cell"), ("overlap_s", 2.0))),
)}


def known_names() -> list[str]:
    return sorted(ACTIONS)


def healing_names() -> tuple[str, ...]:
    """The actions that give a cut path back, as a fault's heal does."""
    return tuple(a.name for a in ACTIONS.values() if a.heals_path)


def cutting_names() -> tuple[str, ...]:
    """The actions that cut the path (the timeline marks them apart)."""
    return tuple(a.name for a in ACTIONS.values() if a.cuts_path)
