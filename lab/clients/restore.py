"""What a fallback session is told: the one client-content restore built from the client's own
transcript and the backend's status note. Pure."""
from __future__ import annotations

from google.genai import types


def merge_turns(transcript: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Consecutive turns of one role joined into one (user/model must alternate in contents)."""
    out: list[tuple[str, str]] = []
    for role, text in transcript:
        text = (text or "").strip()
        if not text:
            continue
        if out and out[-1][0] == role:
            out[-1] = (role, out[-1][1] + " " + text)
        else:
            out.append((role, text))
    return out


def restore_contents(transcript: list[tuple[str, str]], note: str | None, max_turns: int = 6) -> list[types.Content]:
    """The turns of ONE send_client_content that restores a fallback session.

    The last `max_turns` turns of the client's own transcript, then the status note (one
    "System note: ..." line per side effect, from the backend) as a part of a final user turn. No
    filler turn: when there is nothing to restore the list is empty and nothing is sent.
    """
    turns = merge_turns(transcript)[-max_turns:] if max_turns > 0 else []
    contents = [types.Content(role=role, parts=[types.Part(text=text)]) for role, text in turns]
    if note:
        if contents and contents[-1].role == "user":
            contents[-1].parts.append(types.Part(text=note))
        else:
            contents.append(types.Content(role="user", parts=[types.Part(text=note)]))
    return contents
