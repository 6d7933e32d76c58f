"""The user's lines the agent says: a lines-only conversation's own, else the scenario's script.

`lab run --conversation lines.txt` gives the twin the user's lines; the agent must say the same
lines (an app reads them on stdin), or the twin hears the booking story's script instead.
"""
import json

from lab import scenario as scenario_mod
from lab.agent import user_lines

LINES = ["Hi, my order 4417 arrived broken, please refund it.", "Did the refund go through?"]


def test_a_lines_only_conversation_replaces_the_script(tmp_path):
    scn = scenario_mod.load("control")
    assert user_lines(scn, tmp_path) == scn.script            # no conversation.json: an older run folder
    (tmp_path / "conversation.json").write_text(json.dumps({"name": "lines", "source": "lines", "lines": LINES,
                                                            "tools": []}))
    assert user_lines(scn, tmp_path) == LINES
    # a conversation file's lines are the twin's to match; the agent says the scenario's script
    (tmp_path / "conversation.json").write_text(json.dumps({"name": "booking", "source": "file",
                                                            "lines": ["Book me the 3pm slot."], "tools": []}))
    assert user_lines(scn, tmp_path) == scn.script
    (tmp_path / "conversation.json").write_text("{not json")
    assert user_lines(scn, tmp_path) == scn.script
