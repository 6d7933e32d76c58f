"""An order-support agent: a plain google-genai Live app, as a team writes its own.

Nothing in it knows about the lab. It reaches the Live API by its real hostname with the key in
$GOOGLE_API_KEY (the CAs from $SSL_CERT_FILE, as any Python TLS client), reads the user's lines from
stdin, one per line, and sends each as a text turn. Its two tools run here, in this process:

- check_order(order_id): looks the order up in the shop's order table;
- refund_order(order_id): refunds it; the payment provider takes a few seconds (REFUND_S), so the
  tool is declared NON_BLOCKING and the model may speak while it runs.

When the connection dies (an APIError, a 1011 refusal included, or a connection error) it resumes
with the newest session handle every few seconds; it never opens a fresh session. A refund is never
made twice for one order: a second refund_order for a refunded order answers with the first result.

    GOOGLE_API_KEY=... python examples/support/app.py < examples/support/lines.txt
"""
import asyncio
import os
import sys

from google import genai
from google.genai import errors, types

MODEL = os.environ.get("APP_MODEL", "gemini-3.8-live")
RETRY_S = float(os.environ.get("APP_RETRY_S", "3"))
REFUND_S = float(os.environ.get("APP_REFUND_S", "4"))

ORDER_ID = types.Schema(type=types.Type.OBJECT, required=["order_id"],
                        properties={"order_id": types.Schema(type=types.Type.STRING, description="the order number")})
TOOLS = [types.Tool(function_declarations=[
    types.FunctionDeclaration(name="check_order", description="Look up an order: its item, status and amount.",
                              parameters=ORDER_ID),
    types.FunctionDeclaration(name="refund_order", description="Refund an order to the customer's card.",
                              parameters=ORDER_ID, behavior=types.Behavior.NON_BLOCKING),
])]
INSTRUCTIONS = ("You are the support agent of a small web shop. Check an order before you refund it, "
                "and tell the customer the refund's real status.")

# the shop's orders: order number -> record
ORDERS = {
    "4417": {"item": "ceramic teapot", "amount_eur": 39.0, "status": "delivered", "refunded": False},
    "5520": {"item": "wool scarf", "amount_eur": 25.0, "status": "shipped", "refunded": False},
}


def log(*a):
    print("support_app:", *a, file=sys.stderr, flush=True)


def check_order(order_id):
    order = ORDERS.get(str(order_id))
    if order is None:
        return {"error": f"no order {order_id}"}
    return {"order_id": str(order_id), **order}


async def refund_order(order_id):
    order = ORDERS.get(str(order_id))
    if order is None:
        return {"error": f"no order {order_id}"}
    if not order["refunded"]:
        await asyncio.sleep(REFUND_S)        # the payment provider
        order["refunded"] = True
    return {"order_id": str(order_id), "status": "refunded", "amount_eur": order["amount_eur"]}


async def run_tool(fc):
    args = fc.args or {}
    if fc.name == "check_order":
        return check_order(args.get("order_id"))
    if fc.name == "refund_order":
        return await refund_order(args.get("order_id"))
    return {"error": f"unknown tool {fc.name}"}


def config(handle):
    return types.LiveConnectConfig(
        response_modalities=[types.Modality.AUDIO],
        output_audio_transcription=types.AudioTranscriptionConfig(),
        session_resumption=types.SessionResumptionConfig(handle=handle),
        tools=TOOLS, system_instruction=INSTRUCTIONS)


async def read_lines(queue):
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        if line.strip():
            await queue.put(line.strip())


async def session_loop(client, lines):
    handle = None
    while True:
        try:
            async with client.aio.live.connect(model=MODEL, config=config(handle)) as s:
                log("connected", "resumed" if handle else "new")

                async def send_lines():
                    while True:
                        text = await lines.get()
                        await s.send_client_content(turns=types.Content(role="user", parts=[types.Part(text=text)]),
                                                    turn_complete=True)

                async def answer(fc):
                    # answered on the session that asked; if it died meanwhile, the result is lost
                    result = await run_tool(fc)
                    log("tool", fc.name, dict(fc.args or {}), "->", result)
                    await s.send_tool_response(function_responses=[
                        types.FunctionResponse(id=fc.id, name=fc.name, response=result)])

                tasks = set()
                sender = asyncio.create_task(send_lines())
                try:
                    while True:
                        async for msg in s.receive():
                            u = msg.session_resumption_update
                            if u and u.resumable and u.new_handle:
                                handle = u.new_handle
                            if msg.tool_call:
                                for fc in msg.tool_call.function_calls or []:
                                    tasks.add(asyncio.create_task(answer(fc)))
                            sc = msg.server_content
                            if sc and sc.output_transcription and sc.output_transcription.text:
                                log("model:", sc.output_transcription.text)
                finally:
                    sender.cancel()
                    for t in tasks:
                        t.cancel()
        except (errors.APIError, OSError, asyncio.TimeoutError) as e:
            log("connection ended:", type(e).__name__, str(e)[:120])
        except Exception as e:  # websockets' ConnectionClosed on a send, and the like
            log("connection ended:", type(e).__name__, str(e)[:120])
        await asyncio.sleep(RETRY_S)


async def main():
    # a short keepalive (ping every 1 s, 2 s timeout), so a dead path is noticed in seconds
    client = genai.Client(api_key=os.environ["GOOGLE_API_KEY"], http_options=types.HttpOptions(
        async_client_args={"ping_interval": 1, "ping_timeout": 2, "close_timeout": 1}))
    lines = asyncio.Queue()
    reader = asyncio.create_task(read_lines(lines))
    await session_loop(client, lines)
    reader.cancel()


if __name__ == "__main__":
    asyncio.run(main())
