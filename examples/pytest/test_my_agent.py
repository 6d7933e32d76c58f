"""Your agent under B1 (the path dies silently while a booking is pending), in your own test suite.
Run it with `pytest`: the `livelab` fixture comes with the package (see docs/report.md)."""
import os


def test_my_agent_survives_a_silent_loss(livelab):
    run = livelab.run("b1-silent-loss", client=os.environ.get("MY_AGENT_CLIENT", "recovery"),  # or client_cmd=
                      duration=float(os.environ.get("MY_AGENT_DURATION", "30")))             # "python my_agent.py"
    assert run.passed, run.explain()
