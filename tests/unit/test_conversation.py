"""Conversation files (lab.conversation.format) and the engine over them (lab.conversation.engine):
pure units, no I/O beyond reading the catalogue and tmp files."""
from __future__ import annotations

import random

import pytest

from lab import scenario
from lab.conversation import engine as E
from lab.conversation import format as F
from lab.conversation.semantics import BOOKING
from lab.errors import ScenarioError


def engine(name: str, seed: int = 1, **params) -> E.Engine:
    return E.Engine(F.load(name), E.Params(**params), random.Random(seed))


def answer(e: E.Engine, plan: E.Plan, response: dict) -> E.Plan | None:
    """Send the plan's call and answer it with `response`; the plan said after it."""
    step = next(s for s in plan.steps if s.kind == "call")
    call = e.new_call(step.args, step.tool)
    return e.tool_response(call.id, response)[2]


def test_the_catalogue_loads_and_the_booking_story_is_the_contracts_booking():
    assert {"booking", "support", "reservation"} <= set(F.names())
    for n in F.names():
        F.load(n)
    tool = F.load("booking").tools["book_slot"]
    assert tool.semantics == BOOKING           # the report's default and the twin's story are one definition


def test_conversation_json_lists_the_tools_semantics():
    d = F.load("support").to_json()
    assert d["source"] == "file" and [t["name"] for t in d["tools"]] == ["check_order", "refund_order"]
    assert d["tools"][1] == {"name": "refund_order", "side_effect": True, "business_key": ["order_id"],
                             "words": d["tools"][1]["words"]} and "refund" in d["tools"][1]["words"]["verb"]


@pytest.mark.parametrize("text,line,needle", [
    ("name: x\ntools:\n  t: {}\nturnz: []\n", 4, "unknown key 'turnz' (did you mean turns?)"),
    ("name: x\ntools:\n  t:\n    side_efect: true\n", 4, "unknown key of tool t 'side_efect'"),
    ("name: x\ntools:\n  t: {}\nturns:\n  - user: hi\n    call: nope\n", 6, "call: unknown tool 'nope'"),
    ("name: x\ntools:\n  t:\n    business_key: [order_id]\n", 4, "business_key field 'order_id'"),
    ("name: x\ntools:\n  t:\n    say: {don: hi}\n", 4, "unknown say key 'don' (did you mean done?)"),
    ("name: x\ntools:\n  t:\n    stop: {claim: x}\n", 4, "side_effect: true"),
    ("name: x\ntools:\n  t:\n    args:\n      a: {from_line: colour}\n", 5, "from_line: one of"),
    ("name: x\ntools: [\n", 3, "not valid YAML"),
])
def test_every_error_names_its_file_and_line(tmp_path, text, line, needle):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(F.ConversationError) as e:
        F.load(str(p))
    assert str(e.value).startswith(f"{p}:{line}: ") and needle in str(e.value), str(e.value)
    assert e.value.code == 2


def test_a_text_file_is_a_lines_only_conversation(tmp_path):
    p = tmp_path / "lines.txt"
    p.write_text("# my agent\nPlease refund order 4417.\n\nDid the refund go through?\n")
    c = F.load(str(p))
    assert c.source == F.SOURCE_LINES and c.lines == ["Please refund order 4417.", "Did the refund go through?"]
    (tmp_path / "empty.txt").write_text("\n# nothing\n")
    with pytest.raises(F.ConversationError, match="no user lines"):
        F.load(str(tmp_path / "empty.txt"))


def test_a_scenario_names_its_conversation_and_a_bad_one_is_its_line(tmp_path):
    assert scenario.load("control").conversation == "booking"
    src = scenario.resolve("control").read_text()
    p = tmp_path / "s.yaml"
    p.write_text(src + "\nconversation: nope\n")
    n = len(src.splitlines()) + 2
    with pytest.raises(ScenarioError, match=rf"^{p}:{n}: conversation 'nope': unknown conversation"):
        scenario.load(str(p))
    p.write_text(src + "\nconversation: support\n")
    assert scenario.load(str(p)).conversation == "support"


def test_support_refund_takes_the_order_number_from_the_line_and_answers_from_the_response():
    e = engine("support")
    plan = e.user_turn("Where is my order 4417?")
    assert plan.steps[0].tool == "check_order" and plan.steps[0].args == {"order_id": "4417"}
    assert answer(e, plan, {"status": "shipped"}).texts() == ["Order 4417 is shipped."]
    plan = e.user_turn("Please refund order 9921.")
    assert (plan.steps[0].tool, plan.steps[0].args) == ("refund_order", {"order_id": "9921"})
    assert plan.match["by"] == "turn" and plan.match["args_from"]["order_id"].startswith("number '9921'")
    e.new_call(plan.steps[0].args, "refund_order")
    assert e.user_turn("Did the refund go through?").texts() == ["I'm processing the refund for order 9921 now."]
    assert e.tool_response(list(e.calls)[-1], {"status": "refunded"})[2].texts() == \
        ["I'm processing the refund for order 9921."]
    assert e.user_turn("Did the refund go through?").texts() == ["Yes, order 9921 has been refunded."]
    assert e.user_turn("Please refund order 9921.").texts() == ["Order 9921 is already refunded."]   # same key
    assert e.user_turn("Please refund order 5550.").has_call()                                       # another one


def test_support_stop_uses_its_own_sentences_with_the_stop_studys_rates():
    e = engine("support", silent_after_stop_response_p=1.0)
    plan = e.user_turn("Please refund order 4417.")
    call = e.new_call(plan.steps[0].args, "refund_order")
    stop = e.user_turn("Actually, stop. Don't refund it.")
    assert stop.texts() == ["Order 4417 is already refunded."] and 0.522 <= stop.steps[0].delay <= 0.937
    assert e.tool_response(call.id, {"status": "refunded"})[2] is None     # silent after the claim


def test_reservation_reads_date_time_party_and_carries_them_to_the_reservation():
    e = engine("reservation")
    plan = e.user_turn("Is there a table free for 2 people on 2026-12-31 at 8pm?")
    assert plan.steps[0].args == {"date": "2026-12-31", "time": "8pm", "party": 2}
    answer(e, plan, {"status": "available"})
    plan = e.user_turn("Great, reserve it please.")
    assert (plan.steps[0].tool, plan.steps[0].args) == ("reserve_table", {"date": "2026-12-31", "time": "8pm", "party": 2})
    assert plan.match["args_from"]["date"] == "earlier in the conversation"
    key = e.tools["reserve_table"].semantics.key_of(plan.steps[0].args)
    assert key is not None and key.endswith("| 8pm | 2")


def test_content_not_position_a_line_is_what_it_says():
    e = engine("booking")
    assert not e.user_turn("What should I bring?").has_call()                 # F5: R0 does not book
    assert e.user_turn("Hi, can you hear me?").texts() == ["Yes, I can hear you clearly."]   # F14
    assert e.user_turn("Could you book me the 3pm slot tomorrow?").has_call()


def test_a_run_folder_gets_conversation_json_and_the_file_the_twin_loads(tmp_path):
    import json

    from lab.conversation.semantics import JSON_FILE, tools_from_json
    from lab.run import _record_conversation
    copy = _record_conversation("support", tmp_path)
    assert copy == tmp_path / "conversation.yaml" and F.load(str(copy)).name == "support"
    d = json.loads((tmp_path / JSON_FILE).read_text())
    assert set(tools_from_json(d)) == {"check_order", "refund_order"}     # what the report reads
    lines = tmp_path / "my-lines.txt"
    lines.write_text("Please refund order 4417.\n")
    run = tmp_path / "run"
    run.mkdir()
    assert _record_conversation(str(lines), run).name == "conversation.txt"
    assert json.loads((run / JSON_FILE).read_text())["source"] == "lines"


def test_the_twin_service_is_started_with_its_conversation(tmp_path):
    from types import SimpleNamespace

    from lab.topology.services import Twin
    t = Twin(SimpleNamespace(host="endpoint"), cert_dir=tmp_path, api_key="k", log_path=tmp_path / "t.jsonl", t0=None,
             seed=1, conversation=tmp_path / "conversation.yaml")
    argv = t.argv()
    assert argv[argv.index("--conversation") + 1] == str(tmp_path / "conversation.yaml")


def test_a_bad_conversation_stops_lab_twin_serve_with_one_line(tmp_path, capsys):
    from lab.cli import main
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntools:\n  t: {descripton: y}\n")
    assert main(["twin", "serve", "--port", "0", "--conversation", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"lab: {bad}:3: unknown key of tool t 'descripton'")


def test_a_two_slot_request_restored_while_both_calls_are_pending_is_not_issued_again():
    """k3: both functionCalls of one toolCall are under way when a restart restores the line."""
    e = engine("booking")
    line = "Book me the 3pm and the 4pm slots tomorrow, please."
    step = next(s for s in e.user_turn(line, spoken=True).steps if s.kind == "call")
    assert len(e.new_calls([step.args, *step.more], tool=step.tool or None)) == 2
    plan = e.restore([("user", line)], [], True)
    assert plan.why == "book-pending" and all(s.kind != "call" for s in plan.steps)


def test_a_line_said_again_reads_alike_from_the_kept_reading_and_each_plan_keeps_its_own():
    e = engine("support")
    first = e.read("Please refund order 9921.")
    want = {**first, "args": dict(first["args"])}
    first["args"]["order_id"] = "changed"
    first["by"] = "changed"
    again = e.read("Please refund order 9921.")
    assert again == want and again["by"] == "turn" and again is not first
    # the reading a stop gets depends on which tool is the main one: a call made moves it
    e.new_call({"order_id": "9921"}, "refund_order")
    assert e.read("Stop, cancel that.")["tool"] == "refund_order"


def test_declared_tools_are_read_afresh(tmp_path):
    (tmp_path / "lines.txt").write_text("Please check the weather in Paris.\n")
    e = E.Engine(F.from_lines(tmp_path / "lines.txt"), E.Params(), random.Random(1))
    assert e.read("Please check the weather in Paris.")["tool"] is None
    e.declare([{"name": "get_weather", "description": "Check the weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}])
    assert e.read("Please check the weather in Paris.")["tool"] == "get_weather"


def test_a_follow_up_line_asks_the_read_tool_again_for_the_place_it_names(tmp_path):
    (tmp_path / "lines.txt").write_text("What's the weather in Paris?\nAnd what about London?\n")
    e = E.Engine(F.from_lines(tmp_path / "lines.txt"), E.Params(), random.Random(1))
    e.declare([{"name": "get_weather", "description": "Gets today's weather for a city.",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                               "required": ["location"]}}])
    # before any call a bare "what about London?" asks nothing: there is no question to ask again
    assert e.read("And what about London?")["intent"] == "OTHER"
    first = e.read("What's the weather in Paris?")
    assert first["tool"] == "get_weather" and e.args_for("get_weather", "What's the weather in Paris?")[0] == [
        {"location": "Paris"}]
    plan = e.user_turn("What's the weather in Paris?")
    assert plan is not None
    again = e.read("And what about London?")
    assert (again["intent"], again["tool"], again["by"]) == ("CALL", "get_weather", "follow-up")
    calls, why = e.args_for("get_weather", "And what about London?")
    assert calls == [{"location": "London"}] and why["location"] == "place 'London' from the line"
    # a line that names nothing the tool reads is no follow-up
    assert e.read("And thanks a lot?")["intent"] == "OTHER"
