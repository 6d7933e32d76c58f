"""usageMetadata arithmetic for one session (an assumption: the records hold no token counts).

The prompt of each turn is the whole conversation so far (setup, everything the user said, everything
the model said), so the counts grow turn after turn; the response is what the model produced in that
turn. Audio is counted by duration, text by characters; both rates are profile parameters
(usage_audio_tokens_per_s, usage_text_chars_per_token), both labelled "assumption" there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class Usage:
    audio_tokens_per_s: float
    chars_per_token: float
    context: dict[str, int] = field(default_factory=lambda: {"TEXT": 0, "AUDIO": 0})
    _turn_audio_s: float = 0.0      # counted in tokens once, when the turn closes (no per-chunk rounding)
    _turn_chars: int = 0

    def text(self, chars: int) -> int:
        return math.ceil(max(0, chars) / self.chars_per_token)

    def audio(self, seconds: float) -> int:
        return round(max(0.0, seconds) * self.audio_tokens_per_s)

    def heard_text(self, chars: int) -> None:
        self.context["TEXT"] += self.text(chars)

    def heard_audio(self, seconds: float) -> None:
        self.context["AUDIO"] += self.audio(seconds)

    def said_audio(self, seconds: float) -> None:
        self._turn_audio_s += seconds

    def said_text(self, chars: int) -> None:
        self._turn_chars += chars

    def close_turn(self) -> tuple[dict[str, int], dict[str, int]]:
        """(prompt, response) counts for the turn that ends now; the response joins the context."""
        prompt = dict(self.context)
        response = {"TEXT": self.text(self._turn_chars), "AUDIO": self.audio(self._turn_audio_s)}
        for k, v in response.items():
            self.context[k] = self.context.get(k, 0) + v
        self._turn_audio_s, self._turn_chars = 0.0, 0
        return prompt, response
