"""An order-support voice agent, written as LiveKit's docs write one (livekit-agents 1.x).

    python agent.py console                         talk to it locally (LiveKit's own CLI)
    lab run l1-goaway --client livekit:agent:OrderSupport --conversation lines.txt
                                                    the same agent under a fault (from this folder)
"""
from __future__ import annotations

from livekit import agents
from livekit.agents import Agent, AgentSession, RunContext, function_tool
from livekit.plugins import google

# a small in-memory order book stands in for the shop's order system
ORDERS = {
    "A1001": {"item": "espresso grinder", "status": "shipped", "carrier": "DHL", "eta": "Thursday"},
    "A1002": {"item": "milk frother", "status": "processing", "carrier": None, "eta": "next week"},
}
REFUNDS: dict[str, str] = {}


class OrderSupport(Agent):
    def __init__(self) -> None:
        super().__init__(
            instructions=(
                "You are a friendly order-support agent for a coffee equipment shop. "
                "Look orders up by their order number before answering questions about them. "
                "Only start a refund when the customer asks for one, and confirm it once it is started."
            ),
        )

    @function_tool
    async def look_up_order(self, context: RunContext, order_id: str) -> dict:
        """Look up an order's status, carrier and expected delivery.

        Args:
            order_id: the order number, e.g. A1001
        """
        order = ORDERS.get(order_id.strip().upper())
        if order is None:
            return {"found": False, "order_id": order_id}
        return {"found": True, "order_id": order_id.upper(), **order}

    @function_tool
    async def request_refund(self, context: RunContext, order_id: str, reason: str) -> dict:
        """Start a refund for an order.

        Args:
            order_id: the order number, e.g. A1002
            reason: why the customer wants the refund
        """
        key = order_id.strip().upper()
        if key not in ORDERS:
            return {"started": False, "order_id": order_id, "why": "no such order"}
        REFUNDS.setdefault(key, reason)
        return {"started": True, "order_id": key, "refund_id": f"R-{key}"}


async def entrypoint(ctx: agents.JobContext):
    session = AgentSession(llm=google.realtime.RealtimeModel(voice="Puck"))
    await session.start(room=ctx.room, agent=OrderSupport())
    await session.generate_reply(instructions="Greet the customer and ask for their order number.")


if __name__ == "__main__":
    agents.cli.run_app(agents.WorkerOptions(entrypoint_fnc=entrypoint))
