"""The realtime protocols a run speaks, defined once: their names, the default, and the form each
protocol's client is told its endpoint in.

- `gemini`: the Live API (the twin's default wire; every client before the OpenAI one speaks it);
- `openai`: the OpenAI Realtime API (docs/protocol-openai.md).

`lab run --protocol` / `lab matrix --protocol` pick one; the orchestrator serves the twin with it
(`lab twin serve --protocol`), refuses a client or scenario that does not speak it, carries it in
plan.json and run.json, and tells the client its endpoint with `endpoint_url`. The twin's profile
per protocol is `lab.twin.params.DEFAULT_PROFILE`; which protocol a client speaks is its class's
`protocol`, a framework's its `Framework.protocols` (lab.clients.protocols_of); which a scenario applies to, its `protocols:` key. The
real hostnames an unmodified app of each protocol dials are `lab.topology.hostnames.endpoint_names`;
the variables it reads its key from, `KEY_VARS`.
"""
from __future__ import annotations

GEMINI, OPENAI = "gemini", "openai"
PROTOCOLS = (GEMINI, OPENAI)
DEFAULT = GEMINI

# the environment variables an unmodified app of each protocol reads its key from (google-genai:
# GOOGLE_API_KEY, then GEMINI_API_KEY; openai-python: OPENAI_API_KEY), and those that would send it
# elsewhere than the real hostnames (google-genai's base URL overrides; openai-python's
# OPENAI_BASE_URL): a `--client-cmd` app gets its protocol's key in the first, and none of the second
KEY_VARS: dict[str, tuple[str, ...]] = {GEMINI: ("GOOGLE_API_KEY", "GEMINI_API_KEY"), OPENAI: ("OPENAI_API_KEY",)}
BASE_URL_VARS: dict[str, tuple[str, ...]] = {GEMINI: ("GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL"),
                                             OPENAI: ("OPENAI_BASE_URL",)}


# live mode's endpoint when `--base-url` gives none, in the form `endpoint_url` gives a client: None
# is the SDK's own default (google-genai dials generativelanguage.googleapis.com); OpenAI's is named
# here so that an OPENAI_BASE_URL in the lab's environment cannot send a live run elsewhere
# (openai-python's default base is https://api.openai.com/v1, dialled as wss; the model is the
# client's `model` parameter, which the SDK appends as /realtime?model=...)
LIVE_BASE_URL: dict[str, str | None] = {GEMINI: None, OPENAI: "wss://api.openai.com/v1"}


def add_protocol_argument(parser) -> None:
    """`--protocol`, as `lab run` and `lab matrix` take it."""
    parser.add_argument("--protocol", default=DEFAULT, choices=PROTOCOLS,
                        help="the realtime protocol the twin and the client speak: gemini (Live API, default) or "
                             "openai (Realtime API; its clients and scenarios: docs/protocol-openai.md)")


def endpoint_url(protocol: str, base_url: str) -> str:
    """The endpoint as `protocol`'s client takes it, from the lab's https://host:port base:
    Gemini's SDK takes the https base; OpenAI's takes the WebSocket base, wss://host:port/v1, to
    which it appends /realtime?model=... (openai-python's `websocket_base_url`)."""
    if protocol == GEMINI:
        return base_url
    if protocol == OPENAI:
        scheme, sep, rest = base_url.rstrip("/").partition("://")
        ws = {"https": "wss", "http": "ws"}.get(scheme, scheme)
        return f"{ws}{sep}{rest}" + ("" if rest.endswith("/v1") else "/v1")
    raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")


def parse_protocols(text: str) -> tuple[str, ...]:
    """`gemini,openai` (as `lab matrix --protocol` takes it) -> ('gemini', 'openai'): each named once,
    in the order given; an unknown name is a ValueError naming the known ones."""
    names = [p.strip() for p in str(text).split(",") if p.strip()]
    unknown = [p for p in names if p not in PROTOCOLS]
    if unknown or not names:
        raise ValueError(f"unknown protocol {', '.join(unknown) or repr(text)}; known: {', '.join(PROTOCOLS)}")
    return tuple(dict.fromkeys(names))
