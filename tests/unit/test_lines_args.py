"""Lines-only tools fill every required argument from the declaration's schema (lab/conversation/lines.py):
a value the line gives (its kind, an enum value it names, a name, a free-text sentence), else a
value of the declared type, so a framework that checks its tool's arguments accepts the call."""
from lab.conversation import lines as L


def _obj(props, required):
    return {"type": "OBJECT", "properties": props, "required": required}


DECLS = [
    {"name": "look_up_order", "description": "Look up an order's status, carrier and expected delivery.",
     "parameters": _obj({"order_id": {"type": "STRING", "description": "the order number, e.g. A1001"}}, ["order_id"])},
    {"name": "request_refund", "description": "Start a refund for an order.",
     "parameters": _obj({"order_id": {"type": "STRING", "description": "the order number, e.g. A1002"},
                         "reason": {"type": "STRING", "description": "why the customer wants the refund"}},
                        ["order_id", "reason"])},
    {"name": "create_ticket", "description": "Open a support ticket for the caller's problem.",
     "parametersJsonSchema": {"type": "object", "required": ["summary", "priority"], "properties": {
         "summary": {"type": "string", "description": "one sentence describing the problem"},
         "priority": {"type": "string", "enum": ["low", "normal", "urgent"]}}}},
    {"name": "ticket_status", "description": "Look up the status of the caller's ticket.",
     "parameters": _obj({"ticket_id": {"type": "STRING", "description": "the ticket number, e.g. T-1"}}, ["ticket_id"])},
    {"name": "check_slot", "description": "Checks whether a table for the party is free at the given time tonight.",
     "parameters": _obj({"time": {"type": "STRING"}, "party_size": {"type": "INTEGER"}}, ["time", "party_size"])},
    {"name": "reserve_table", "description": "Reserves a table for the party.",
     "parameters": _obj({"time": {"type": "STRING"}, "party_size": {"type": "INTEGER"}, "name": {"type": "STRING"}},
                        ["time", "party_size", "name"])},
]
TOOLS, _ = L.tools_from_declarations(DECLS)


def _call(tool, line):
    t = TOOLS[tool]
    base = {a.name: a.value for a in t.args if a.value is not None}
    calls, why = L.fill(t, line, base)
    assert len(calls) == 1
    return calls[0], why


def test_a_refunds_reason_is_the_users_own_sentence_not_the_ask():
    args, why = _call("request_refund", "The frother on order A1002 is taking too long, I want a refund for it.")
    assert args == {"order_id": "A1002", "reason": "The frother on order A1002 is taking too long"}
    assert why["reason"].startswith("sentence ")


def test_a_required_string_the_line_does_not_give_is_a_placeholder_never_empty():
    args, why = _call("request_refund", "Please refund order A1002.")
    assert args == {"order_id": "A1002", "reason": "reason not given"} and why["reason"] == "default"


def test_an_enum_takes_the_value_the_line_names_else_its_first():
    args, why = _call("create_ticket", "My laptop won't connect to the office VPN since this morning, "
                                       "please create a ticket, it's urgent.")
    assert args == {"summary": "My laptop won't connect to the office VPN since this morning", "priority": "urgent"}
    assert why["priority"] == "enum value 'urgent' from the line"
    assert _call("create_ticket", "Create a ticket: the printer on floor two jams")[0]["priority"] == "low"


def test_a_short_identifier_after_its_word_a_24_hour_time_and_a_party_in_words():
    assert _call("ticket_status", "What's the status of ticket T-1?")[0] == {"ticket_id": "T-1"}
    assert _call("check_slot", "Do you have a table for four at 19:30 tonight?")[0] == {"time": "19:30", "party_size": 4}
    assert _call("check_slot", "A table for 2 at 7pm?")[0] == {"time": "7pm", "party_size": 2}


def test_a_name_after_under_and_typed_defaults_for_what_the_line_leaves_out():
    args, why = _call("reserve_table", "Great, please reserve it under the name Rivera.")
    assert args == {"time": "time not given", "party_size": 1, "name": "Rivera"}
    assert isinstance(args["party_size"], int)


def test_declared_value_by_type_default_enum_and_format():
    dv = L.declared_value
    assert dv("n", {"type": "integer"}, True) == 1
    assert dv("n", {"type": "integer", "minimum": 3}, True) == 3
    assert dv("x", {"type": "number"}, True) == 1.0
    assert dv("notify", {"type": "boolean"}, True) is False
    assert dv("tags", {"type": "array"}, True) == [] and dv("meta", {"type": "object"}, True) == {}
    assert dv("email", {"type": "string", "format": "email"}, True) == "user@example.com"
    assert dv("customer_name", {"type": "STRING"}, True) == "customer name not given"
    assert dv("q", {"type": "string", "default": "all"}, True) == "all"
    assert dv("level", {"type": "string", "enum": ["a", "b"]}, False) == "a"
    assert dv("note", {"type": "string"}, False) is None       # optional: left out
    assert dv("kind", {"type": ["null", "integer"]}, True) == 1


def test_every_required_argument_of_every_tool_has_a_value_of_its_type():
    for d in DECLS:
        t = TOOLS[d["name"]]
        args, _ = L.fill(t, "hello", {a.name: a.value for a in t.args if a.value is not None})
        schema = d.get("parameters") or d["parametersJsonSchema"]
        for name in schema["required"]:
            v = args[0][name]
            want = {"string": str, "integer": int}[schema["properties"][name]["type"].lower()]
            assert isinstance(v, want) and v != "", (d["name"], name, v)


def test_a_quoted_value_still_wins_for_free_text():
    args, why = _call("create_ticket", 'Please create a ticket "VPN down since 9" and make it normal')
    assert args == {"summary": "VPN down since 9", "priority": "normal"}


def test_a_tools_sentences_name_what_it_acts_on_not_how():
    # request_refund acts on an order; "request" says how
    assert TOOLS["request_refund"].say["done"] == "Order {order_id} is refunded."
    assert TOOLS["reserve_table"].say["done"] == "Table {time} is reserved."
    assert TOOLS["look_up_order"].semantics.words.noun == ("look", "order")


def test_the_booking_story_on_an_agents_own_tool_calls_it_with_the_declared_arguments():
    # a scenario's own conversation (the booking story) on an agent that declares reserve_table: the
    # call carries reserve_table's parameters, not the story's `slot`, so ADK does not refuse it
    import random

    from lab.twin import model as M

    m = M.ScriptedModel(M.ModelConfig(), random.Random(1))
    m.declare([DECLS[-1]])
    plan = m.user_turn("Book me the 3pm slot tomorrow, please.")
    call = next(s for s in plan.steps if s.kind == "call")
    assert call.tool == "reserve_table"
    assert call.args == {"time": "3pm", "party_size": 1, "name": "name not given"}, call.args
    assert m.tools["reserve_table"].semantics.business_key == ("time", "party_size", "name")


def test_a_sentence_names_the_thing_by_a_short_key_never_by_free_text():
    assert TOOLS["create_ticket"].say["done"] == "The ticket is created."
    assert TOOLS["request_refund"].say["pending"] == "I'm refunding order {order_id} now."


def test_a_full_restaurant_is_no_reservation_but_successfully_is_done():
    from lab.conversation.engine import DONE, FAILED, response_status
    assert response_status({"result": {"status": "full", "time": "3pm"}}) == FAILED
    assert response_status({"status": "successfully reserved"}) == DONE
    assert response_status({"status": "reserved", "reference": "T001"}) == DONE
