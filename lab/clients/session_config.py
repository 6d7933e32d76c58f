"""What a lab client asks the Live API for when it opens a session: the setup's LiveConnectConfig
(audio out, both transcriptions, session resumption with the lineage's handle, the book_slot tool)."""
from __future__ import annotations

from typing import Any

from google.genai import types

DEFAULT_SYSTEM_INSTRUCTION = (
    "You are a booking assistant on a voice line. When the user asks to book a slot, call the book_slot "
    "tool with the slot as the user said it. Say plainly whether a booking is made, still in progress, or "
    "not made: call it made only when a tool result or a system note says it is booked. "
    "Keep every answer to one or two short sentences."
)


def book_slot_declaration(blocking: bool = False) -> types.FunctionDeclaration:
    return types.FunctionDeclaration(
        name="book_slot",
        description="Book an appointment slot for the user. Takes a few seconds to commit.",
        parameters=types.Schema(type=types.Type.OBJECT, properties={
            "slot": types.Schema(type=types.Type.STRING, description="The slot as the user said it, e.g. 'tomorrow 3pm'."),
        }, required=["slot"]),
        behavior=types.Behavior.BLOCKING if blocking else types.Behavior.NON_BLOCKING,
    )


def live_config(handle: str | None, *, blocking: bool = False, system_instruction: str = DEFAULT_SYSTEM_INSTRUCTION,
                voice: str | None = None) -> types.LiveConnectConfig:
    kw: dict[str, Any] = {}
    if voice:
        kw["speech_config"] = types.SpeechConfig(voice_config=types.VoiceConfig(
            prebuilt_voice_config=types.PrebuiltVoiceConfig(voice_name=voice)))
    return types.LiveConnectConfig(
        response_modalities=[types.Modality.AUDIO],
        output_audio_transcription=types.AudioTranscriptionConfig(),
        input_audio_transcription=types.AudioTranscriptionConfig(),
        session_resumption=types.SessionResumptionConfig(handle=handle),
        tools=[types.Tool(function_declarations=[book_slot_declaration(blocking)])],
        system_instruction=system_instruction,
        **kw,
    )
