"""The Live API model a run asks for when nobody names one (`--model`, a client's Endpoint).

The one spelling of the default model's id in the lab's code: the orchestrator, the agent, the
clients, the shards and the benchmarks ask for it here. The twin serves it (its profile's
`served_models`), and the framework peers and examples, which run in their own venvs and import
nothing of the lab's, fall back to the same id when $APP_MODEL is unset:
tests/unit/test_model_id.py keeps those copies equal to this one.
"""

DEFAULT_MODEL = "gemini-3.8-live"
