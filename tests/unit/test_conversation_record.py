"""`lab conversation record` (lab/record/conversation.py) over a run folder written here: the user's
turns, tool calls with their arguments and the model's words come back as a conversation file that
the conversation loader takes, with handles, keys and audio left out. No network."""
import json

import pytest

from lab.conversation import format as conversations
from lab.errors import LabError
from lab.record.conversation import record

KEY = "AIza" + "B" * 35
TOOLS = [{"name": "refund_order", "side_effect": True, "business_key": ["order_id"],
          "words": {"verb": ["refund"], "doing": ["refunding"], "done": ["refunded"], "noun": ["refund"]}},
         {"name": "look_up_order", "side_effect": False, "business_key": ["order_id"], "words": {}}]


def _folder(tmp_path):
    run = tmp_path / "m3-proxy-idle-timeout-livekit-agent-01"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"scenario": {"name": "m3-proxy-idle-timeout"}, "client": "livekit"}))
    recs = [
        {"ms": 100, "kind": "twin.conversation", "session": "s1", "source": "lines", "tools": TOOLS},
        {"ms": 120, "kind": "twin.handle", "handle_len": 40, "handle_sha": "abcd1234"},
        {"ms": 2000, "kind": "twin.model", "source": "client_content", "text": f"Refund order 4417, my key is {KEY}",
         "match": {"intent": "CALL", "tool": "refund_order"}, "plan": "call"},
        {"ms": 2500, "kind": "twin.tool_call", "id": "c1", "name": "refund_order", "args": {"order_id": "4417"}},
        {"ms": 2600, "kind": "twin.tool_response", "id": "c1", "name": "refund_order", "status": "refunded"},
        {"ms": 3100, "kind": "twin.say", "text": "I'm processing the refund for order 4417."},
        {"ms": 9000, "kind": "twin.model", "source": "speech", "text": "Did the refund go through?",
         "match": {"intent": "STATUS", "tool": "refund_order"}, "plan": "status-booked"},
        {"ms": 9400, "kind": "twin.say", "text": "Yes, order 4417 is refunded."},
        {"ms": 12000, "kind": "twin.model", "source": "client_content", "text": "Thanks, that's all.",
         "match": {"intent": "OTHER"}, "plan": "other"},
        {"ms": 12300, "kind": "twin.say", "text": "You're welcome."},
    ]
    (run / "twin.jsonl").write_text("".join(json.dumps({"t": 0, "src": "twin", **r}) + "\n" for r in recs)
                                    + '{"cut by a kill')
    return run


def test_a_run_becomes_a_conversation_the_loader_takes(tmp_path):
    text = record(_folder(tmp_path))
    out = tmp_path / "recorded.yaml"
    out.write_text(text)
    conv = conversations.load(str(out))
    assert [(t.user, t.call, dict(t.args), t.say) for t in conv.turns] == [
        ("Refund order 4417, my key is <key>", "refund_order", {"order_id": "4417"}, None),
        ("Did the refund go through?", None, {}, None),            # answered from what happened
        ("Thanks, that's all.", None, {}, "You're welcome."),
    ]
    refund = conv.tools["refund_order"]
    assert refund.semantics.side_effect and refund.semantics.business_key == ("order_id",)
    assert dict(refund.say) == {"done": "I'm processing the refund for order 4417.",
                                "status_done": "Yes, order 4417 is refunded."}
    assert conv.tools["look_up_order"].semantics.side_effect is False
    # the timing is kept, as comments; keys and handles are not
    assert "at 2.0 s (client_content)" in text and "refund_order(order_id=4417) at +0.5 s; result refunded" in text
    assert KEY not in text and "abcd1234" not in text and "handle" not in text


def test_a_folder_with_nothing_to_record_is_one_line(tmp_path):
    with pytest.raises(LabError, match="no twin.jsonl"):
        record(tmp_path)
    (tmp_path / "twin.jsonl").write_text(json.dumps({"ms": 1, "kind": "twin.accept"}) + "\n")
    with pytest.raises(LabError, match="no user turn"):
        record(tmp_path)
