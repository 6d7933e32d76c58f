"""A session's realtimeInputConfig, read from its setup: who decides where a user turn starts and ends.

    automaticActivityDetection.disabled   true: turns are exactly the client's activityStart..activityEnd
                                          windows (push-to-talk, a client-side VAD); the twin's VAD is off
    automaticActivityDetection.silenceDurationMs / prefixPaddingMs
                                          the server VAD's end-of-speech silence and start-of-speech
                                          minimum (None: the profile's figures from the records)
    activityHandling                      NO_INTERRUPTION: the user's speech does not cut the model's turn

The setup arrives normalised to camelCase by lab.twin.wire, so snake_case keys (what the SDK sends
nested) are read the same. Pure: no profile, no clock.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ActivityConfig:
    automatic: bool = True
    interrupts: bool = True
    silence_ms: float | None = None
    prefix_ms: float | None = None


def _ms(value: Any) -> float | None:
    """A millisecond count as the proto JSON sends it (int32: a number or a numeric string)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v >= 0 else None


def activity_config(setup: dict) -> ActivityConfig:
    ric = setup.get("realtimeInputConfig")
    if not isinstance(ric, dict):
        return ActivityConfig()
    aad = ric.get("automaticActivityDetection")
    aad = aad if isinstance(aad, dict) else {}
    handling = str(ric.get("activityHandling") or "").upper()
    return ActivityConfig(automatic=not bool(aad.get("disabled")),
                          interrupts=handling != "NO_INTERRUPTION",
                          silence_ms=_ms(aad.get("silenceDurationMs")),
                          prefix_ms=_ms(aad.get("prefixPaddingMs")))
