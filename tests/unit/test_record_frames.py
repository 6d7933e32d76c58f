"""The frames record every run writes: no handle, no audio, and its round trip into a replay script."""
import json

from lab.record.frames import PLACEHOLDER, FrameRecorder, materialize, read_frames, replay_script, sanitize

SERVER = [
    (1, 410.0, {"setupComplete": {}}),
    (1, 412.0, {"sessionResumptionUpdate": {"newHandle": "CiQ-real-handle-" + "z" * 80, "resumable": True}}),
    (1, 2500.0, {"toolCall": {"functionCalls": [{"id": "fc-1", "name": "book_slot", "args": {"slot": "tomorrow 3pm"}}]}}),
    (2, 6100.0, {"setupComplete": {}}),
    (2, 6101.0, {"sessionResumptionUpdate": {"newHandle": "CiQ-other-" + "y" * 80, "resumable": True}}),
    (2, 7000.0, {"serverContent": {"modelTurn": {"parts": [{"inlineData": {"mimeType": "audio/pcm;rate=24000",
                                                                          "data": "AAAA" * 100}}]}}}),
    (2, 7300.0, {"serverContent": {"turnComplete": True}}),
]


def test_replay_round_trip(tmp_path):
    rec = FrameRecorder(tmp_path / "frames.jsonl")
    for conn, ms, msg in SERVER:
        rec.frame(conn, ms, json.dumps(msg))
    rec.close_frame(2, 9000.0, 1011, "Internal error encountered.")
    rec.close()
    text = (tmp_path / "frames.jsonl").read_text()
    assert "real-handle" not in text and "other-" not in text and "AAAA" not in text
    frames = read_frames(tmp_path / "frames.jsonl")
    assert [f["kind"] for f in frames][:3] == ["setupComplete", "sessionResumptionUpdate", "toolCall"]
    script = replay_script(frames)
    assert sorted(script) == [1, 2]
    assert [s["after_ms"] for s in script[1]] == [0.0, 2.0, 2090.0]
    assert script[2][-1] == {"conn": 2, "after_ms": 2900.0, "close": 1011, "reason": "Internal error encountered."}
    sent = materialize(script[1][1], "twin-handle-1")["send"]
    assert sent == {"sessionResumptionUpdate": {"newHandle": "twin-handle-1", "resumable": True}}
    assert script[1][2]["send"] == SERVER[2][2]                      # everything else comes back unchanged
    assert script[2][2]["send"]["serverContent"]["modelTurn"]["parts"][0]["inlineData"]["data"] == "<audio 400 bytes>"
    assert sanitize(SERVER[5][2], keep_audio=True) == SERVER[5][2]
    assert sanitize({"newHandle": ""}) == {"newHandle": ""} and PLACEHOLDER == "<handle>"
