"""The twin's core for the OpenAI Realtime protocol: what lab.twin.core.TwinCore is for Gemini, with
the same interface to the asyncio shell (lab.twin.server picks one by protocol):

    core.check_upgrade(path, headers)                    -> Upgrade
    core.connection_opened(conn, now, route, peer, key)  -> [actions]
    core.frame_received(conn, data, now)                 -> [actions]
    core.connection_ended(conn, how, now)                -> [actions]
    core.timer_fired(key, now)                           -> [actions]
    core.set_fault(name, on, now)                        -> [actions]   (the shell's own faults, server_error)
    core.go_away(now, time_left_s=None)                  -> [actions]   (OpenAI has no goAway: nothing)
    core.pong_delay()                                    -> seconds to hold a pong
    core.ear = True; core.speech_heard(sid, utt, heard, match, now) -> [actions]   (the shell's recognizer)

It composes the OpenAI wire (lab.twin.openai_wire) and session room (lab.twin.openai_session) over
an openai profile, with the conversation the Gemini twin plays. Knows nothing of sockets or the clock.
"""
from __future__ import annotations

import math
import random
from typing import Any

from lab.conversation.format import Conversation
from lab.conversation.format import load as load_conversation
from lab.errors import LabError
from lab.stats.distributions import draw
from lab.twin import openai_wire as W
from lab.twin.io_actions import Action, Log, Send, TimerKey
from lab.twin.model import ModelConfig
from lab.twin.openai_session import OpenAIParams, OpenAISessions
from lab.twin.params import OPENAI
from lab.twin.profile import Profile, load_profile

# the shell's faults a scenario can switch at run time (POST /fault), by their profile parameter;
# the Gemini session faults (unresumable updates, quota) have no OpenAI counterpart modelled yet
SLOW_PONGS, STALL = "slow_pongs", "stall"
FAULTS = {SLOW_PONGS: "slow_pongs", STALL: "stall"}
# a fault that happens once when switched on, no state kept: the server's own failure on every open
# session (lab.twin.openai_session.OpenAISessions.server_error)
SERVER_ERROR = "server_error"
KNOWN_FAULTS = (*FAULTS, SERVER_ERROR)      # what POST /fault may name


class UnknownFault(LabError):
    """A fault name the OpenAI twin does not have."""


class OpenAICore:
    """All connections (each its own session) of one OpenAI twin."""

    def __init__(self, profile: Profile | str = "openai-realtime", overrides=None, seed: int | None = None,
                 api_key: str | None = None, conversation: Conversation | str | None = None):
        self.profile = load_profile(profile, overrides, protocol=OPENAI) if isinstance(profile, str) else \
            profile.with_overrides(overrides)
        if self.profile.protocol != OPENAI:
            raise LabError(f"twin profile {self.profile.name!r} is for the {self.profile.protocol} protocol, not openai")
        self.api_key = api_key
        self.rng = random.Random(seed)
        self.faults = {name for name, param in FAULTS.items() if self.profile[param]}
        self._pong_delay_s = self.profile["pong_delay_s"]
        self.conversation = load_conversation(conversation) if isinstance(conversation, str) else conversation
        self.sessions = OpenAISessions(OpenAIParams.from_profile(self.profile),
                                       ModelConfig.from_profile(self.profile, self.conversation), self.rng)

    def check_upgrade(self, path: str, headers: Any) -> W.Upgrade:
        return W.check_upgrade(path, headers, self.api_key)

    def connection_opened(self, conn_id: int, now: float, route: str = "", peer: Any = None,
                          key: str = "") -> list[Action]:
        return self._sent(self.sessions.opened(conn_id, now, route, peer, key))

    def frame_received(self, conn_id: int, data: bytes | str, now: float) -> list[Action]:
        return self._sent(self.sessions.frame(conn_id, data, now))

    # ---- the shell's ear (lab.twin.recognizer.Ear): set by the shell that can run one ----------
    @property
    def ear(self) -> bool:
        return self.sessions.ear

    @ear.setter
    def ear(self, on: bool) -> None:
        self.sessions.ear = on

    @property
    def hears(self) -> bool:
        """Spoken turns are read by their words (an ear, and the profile's hear_speech on)."""
        return self.sessions.hears

    def speech_heard(self, sid: str, utt: int, heard, match, now: float) -> list[Action]:
        """What the shell's recognizer heard in one spoken turn (lab.twin.io_actions.Hear)."""
        return self._sent(self.sessions.speech_heard(sid, utt, heard, match, now))

    def connection_ended(self, conn_id: int, how: str, now: float) -> list[Action]:
        return self.sessions.ended(conn_id, how, now)

    def timer_fired(self, key: TimerKey, now: float) -> list[Action]:
        return self._sent(self.sessions.fire(key, now))

    def set_fault(self, name: str, on: bool, now: float) -> list[Action]:
        if name == SERVER_ERROR:
            log = Log("twin.fault", {"name": name, "on": bool(on)})
            return [log, *self.sessions.server_error(now)] if on else [log]
        if name not in FAULTS:
            raise UnknownFault(f"unknown OpenAI twin fault {name!r}; known: {', '.join(sorted(KNOWN_FAULTS))}")
        (self.faults.add if on else self.faults.discard)(name)
        return [Log("twin.fault", {"name": name, "on": bool(on)})]

    def go_away(self, now: float, time_left_s: float | None = None) -> list[Action]:
        return []       # the OpenAI protocol has no goAway; its cap is the session_expired error

    def pong_delay(self) -> float:
        if STALL in self.faults:
            return math.inf
        return draw(self._pong_delay_s, self.rng) if SLOW_PONGS in self.faults else 0.0

    def _sent(self, acts: list[Action]) -> list[Action]:
        if STALL in self.faults:
            # the silent stall: the socket stays open and no event goes out (closes still do)
            return [a for a in acts if not isinstance(a, Send)]
        return acts
