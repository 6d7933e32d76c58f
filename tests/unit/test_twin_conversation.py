"""The twin plays a conversation: a team's file or its user's lines, mapped onto the Gemini wire
(functionDeclarations in, toolCall with real arguments out, twin.model and twin.conversation in
twin.jsonl). On the simulated clock of test_twin_core."""
from __future__ import annotations

from lab.twin.core import TwinCore
from tests.unit.test_twin_core import Sim

SUPPORT_TOOLS = [{"functionDeclarations": [
    {"name": "check_order", "description": "Look up an order's status by its number.",
     "parameters": {"type": "OBJECT", "properties": {"order_id": {"type": "STRING"}}, "required": ["order_id"]}},
    {"name": "refund_order", "description": "Refund an order by its number.",
     "parameters": {"type": "OBJECT", "properties": {"order_id": {"type": "STRING"}}, "required": ["order_id"]}},
]}]


class ConvSim(Sim):
    def __init__(self, conversation, peer="10.0.0.2:40000", seed=7, **overrides):
        super().__init__(**overrides)
        self.core = TwinCore("developer-api", overrides or None, seed=seed, conversation=conversation)
        self.peer = peer

    def open(self, conn: int):
        self.apply(self.core.connection_opened(conn, self.now, "v1", peer=self.peer))


def session(sim: Sim, conn: int = 1, tools=SUPPORT_TOOLS) -> None:
    sim.setup(conn, extra={"tools": tools})
    sim.after(0.4)


def calls(sim: Sim, conn: int = 1) -> list[tuple[str, dict]]:
    return [(c["name"], c["args"]) for f in sim.frames(conn, "toolCall") for c in f["toolCall"]["functionCalls"]]


def respond(sim: Sim, conn: int, response: dict) -> None:
    cid = sim.frames(conn, "toolCall")[-1]["toolCall"]["functionCalls"][0]["id"]
    sim.send(conn, {"tool_response": {"function_responses": [{"id": cid, "response": response}]}})


def test_a_support_conversation_calls_refund_order_with_the_order_number_of_the_line():
    sim = ConvSim("support")
    session(sim)
    (conv,) = sim.logs_of("twin.conversation")
    assert conv["source"] == "file" and conv["name"] == "support"
    assert {t["name"]: t["side_effect"] for t in conv["tools"]} == {"check_order": False, "refund_order": True}
    sim.text(1, "Hello, please refund order 5512.")
    sim.after(2)
    assert calls(sim) == [("refund_order", {"order_id": "5512"})]
    model = sim.logs_of("twin.model")[-1]
    assert model["tool"] == "refund_order" and model["args"] == {"order_id": "5512"}
    assert model["match"]["by"] == "turn" and "5512" in model["match"]["args_from"]["order_id"]
    respond(sim, 1, {"status": "refunded"})
    sim.after(3)
    sim.text(1, "Did the refund go through?")
    sim.after(4)
    assert sim.said(1)[-1] == "Yes, order 5512 has been refunded."


def test_lines_only_builds_the_tools_from_the_declarations_and_says_what_it_assumed(tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("Where is my order 7781?\nPlease refund order 7781.\nDid the refund go through?\n")
    sim = ConvSim(str(lines))
    session(sim)
    (conv,) = sim.logs_of("twin.conversation")
    assert conv["source"] == "lines"
    tools = {t["name"]: t for t in conv["tools"]}
    assert tools["refund_order"]["side_effect"] and not tools["check_order"]["side_effect"]
    assert tools["refund_order"]["business_key"] == ["order_id"]
    assert "refund" in conv["assumed"]["refund_order"] and "only reads" in conv["assumed"]["check_order"]
    sim.text(1, "Where is my order 7781?")
    sim.after(2)
    assert calls(sim) == [("check_order", {"order_id": "7781"})]
    respond(sim, 1, {"status": "shipped", "eta": "2 days"})
    sim.after(3)
    assert sim.said(1)[-1] == "Order 7781: status shipped, eta 2 days."
    sim.text(1, "Please refund order 7781.")
    sim.after(2)
    assert calls(sim)[-1] == ("refund_order", {"order_id": "7781"})
    why = sim.logs_of("twin.model")[-1]["match"]
    assert why["by"] == "lines" and why["score"] >= 2 and "refund" in why["matched"]
    respond(sim, 1, {"status": "refunded"})
    sim.after(3)
    sim.text(1, "Did the refund go through?")
    sim.after(4)
    assert sim.said(1)[-1] == "Yes, order 7781 is refunded."
    sim.text(1, "What's the weather like?")
    sim.after(4)
    assert len(calls(sim)) == 2 and sim.logs_of("twin.model")[-1]["match"]["by"] == "none"


def test_lines_only_is_deterministic_for_a_seed(tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("Please refund order 7781.\n")

    def run():
        sim = ConvSim(str(lines))
        session(sim)
        sim.text(1, "Please refund order 7781.")
        sim.after(2)
        return [(round(at, 6), f) for at, f, _ in sim.sent[1]]
    assert run() == run()


BOOKING_TOOLS = [{"functionDeclarations": [{"name": "book_slot", "description": "Book a slot.",
                                            "parameters": {"type": "OBJECT", "properties": {"slot": {"type": "STRING"}}}}]}]


def test_a_conversation_whose_tools_the_client_lacks_refuses_the_setup_with_one_lab_line():
    """The support conversation asks for check_order and refund_order; a client declaring only
    book_slot gets no setupComplete but a close whose reason is the lab's one line, which ends
    the run (lab.live.errors) instead of a conversation judged against tools it never had."""
    from lab.errors import LAB_REASON
    from lab.events import Event
    from lab.live.errors import LAB, live_stop
    sim = ConvSim("support")
    session(sim, tools=BOOKING_TOOLS)
    assert not sim.frames(1, "setupComplete")
    (refuse,) = sim.logs_of("twin.refuse")
    assert refuse["code"] == 1008 and refuse["why"] == "undeclared_tool"
    assert refuse["reason"].startswith(LAB_REASON + "the conversation calls check_order, refund_order")
    assert "it declares book_slot" in refuse["reason"] and len(refuse["reason"].encode()) <= 123
    stop = live_stop(Event("conn.closed", 0.0, 10, "client", {"conn": 1, "code": 1008, "reason": refuse["reason"]}))
    assert stop is not None and stop.kind == LAB and str(stop).startswith("the run stopped: the conversation calls")


def test_the_default_booking_story_and_lines_only_never_refuse_for_tools(tmp_path):
    sim = ConvSim("booking")
    session(sim, tools=SUPPORT_TOOLS)            # the studies' story, put on whatever the client has
    assert sim.frames(1, "setupComplete") and not sim.logs_of("twin.refuse")
    lines = tmp_path / "lines.txt"
    lines.write_text("Please refund order 5512.\n")
    sim = ConvSim(str(lines))
    session(sim, tools=BOOKING_TOOLS)            # built from the declarations: nothing to lack
    assert sim.frames(1, "setupComplete") and not sim.logs_of("twin.refuse")


def test_a_conversation_the_client_declares_in_full_is_played():
    sim = ConvSim("support")
    session(sim)
    assert sim.frames(1, "setupComplete") and not sim.logs_of("twin.refuse")
