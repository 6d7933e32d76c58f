"""The OpenAI catalogue, scenario by scenario: every scenario that applies to OpenAI and that
test_openai_runs.py does not run, with the reference client `openai-recovery`, each verdict the one
docs/protocol-openai.md claims; and the plain `openai` client (the unmodified SDK, no recovery of its
own) where its FAIL is the finding, asserted by its outcome names.

One batch per client, shared by the asserts; durations shortened where the verdict is settled sooner.
"""
import pytest

from lab import scenario as scenario_mod
from lab.events import read_events
from tests.integration.openai_batch import RUNS_SCENARIOS, RUNS_SPOKEN, run_batch, status

pytestmark = [pytest.mark.netns, pytest.mark.slow]

CATALOGUE = [n for n in scenario_mod.names_for("openai") if n not in (*RUNS_SCENARIOS, *RUNS_SPOKEN)]
# the scenarios whose reference verdict is a FAIL for every client: the server stalls every socket
# for the rest of the run, so no new session ever starts (docs/protocol-openai.md)
FAILS_FOR_EVERY_CLIENT = {"l3-stall"}
# the plain client, where its FAIL is the finding: each with the outcomes that fail and a duration that
# leaves conversation_back's 20 s bound behind the loss
NAIVE_FAILS = {
    "n1-network-switch": ({"conversation_back", "last_line_answered"}, 30),
    "l4-server-error": ({"conversation_back", "last_line_answered"}, 30),
    "m4-mtu-blackhole": ({"no_zombie_left"}, 40),
}


@pytest.fixture(scope="module")
def recovery(tmp_path_factory):
    return run_batch(tmp_path_factory, "openai-recovery", CATALOGUE, {})


@pytest.fixture(scope="module")
def naive(tmp_path_factory):
    return run_batch(tmp_path_factory, "openai", [*NAIVE_FAILS, "r2-freeze"],
                     {name: d for name, (_, d) in NAIVE_FAILS.items()} | {"r2-freeze": 40})


def test_the_catalogue_covers_what_the_issue_asks_on_both_protocols():
    both = {n for n in scenario_mod.names_for("openai") if "gemini" in scenario_mod.load(n).protocols}
    assert {"r1-clean-close", "r2-freeze", "m1-nat-idle-reap", "m3-proxy-idle-timeout", "m4-mtu-blackhole",
            "n1-network-switch", "b1-silent-loss", "b2-path-return"} <= both
    assert {"l1-session-cap", "l4-server-error"} <= set(CATALOGUE + RUNS_SCENARIOS) - both   # OpenAI's own


@pytest.mark.parametrize("name", CATALOGUE)
def test_the_reference_client_gets_the_verdict_the_docs_claim(recovery, name):
    run, v, lines = recovery[name]
    got = status(v)
    assert v["protocol"] == "openai"
    assert got["effects_once"] == "pass", got             # the booking once, whatever the fault
    if name in FAILS_FOR_EVERY_CLIENT:
        assert not v["pass"] and got["last_line_answered"] == "fail", got
        evs = read_events(run / "events.jsonl")
        assert [e for e in evs if e.kind == "loss.detected"] and [e for e in evs if e.kind == "fallback.new_failed"]
        return
    assert v["pass"], (name, got, "\n".join(lines[-30:]))
    assert got["last_line_answered"] == "pass" and got["truthful_claims"] == "pass", got
    # never the old call_id in a new session: no tool result the twin did not know
    twin = read_events(run / "twin.jsonl")
    assert not [e for e in twin if e.kind == "twin.tool_response" and e.get("known") is False], name


def test_the_server_error_is_the_servers_close_and_the_reference_client_moves_on(recovery):
    run, v, _ = recovery["l4-server-error"]
    twin = read_events(run / "twin.jsonl")
    assert [e.get("type") for e in twin if e.kind == "twin.error_event"] == ["server_error"]
    assert [e.get("how") for e in twin if e.kind == "twin.conn.end"][0] == "server_error"
    assert v["rules"]["no_reliance_on_goaway"]["status"] == "pass" and v["met"] and v["reproduces"]


def test_the_zombie_mtu_path_loses_no_line_the_reference_client_asks_it_again(recovery):
    run, v, _ = recovery["m4-mtu-blackhole"]
    got = status(v)
    assert got["conversation_back"] == got["no_zombie_left"] == got["no_invented_turn"] == "pass", got
    evs = read_events(run / "events.jsonl")
    # a line asked again is one the user said, whose reply never arrived
    reasked = [e for e in evs if e.kind == "user.replay" and e.get("how") == "restore"]
    assert reasked and {e.get("line") for e in reasked} <= {e.get("line") for e in evs if e.kind == "user.say"}


def test_the_freeze_goes_through_the_proxy(recovery):
    run, v, _ = recovery["r2-freeze"]
    evs = read_events(run / "events.jsonl")
    plan_proxy = (run / "plan.json").read_text()
    assert '"proxy": "http' in plan_proxy
    assert [e.get("what") for e in evs if e.kind == "action"][:1] == ["freeze"]
    assert [e.get("purpose") for e in evs if e.kind == "conn.open"] == ["initial", "new"]


@pytest.mark.parametrize("name", sorted(NAIVE_FAILS))
def test_the_plain_sdk_client_fails_its_user_where_the_docs_say(naive, name):
    run, v, lines = naive[name]
    got = status(v)
    failing, _ = NAIVE_FAILS[name]
    assert not v["pass"] and {o for o, s in got.items() if s == "fail"} == failing, (name, got)
    assert got["effects_once"] == "pass", got
    evs = read_events(run / "events.jsonl")
    assert [e.get("purpose") for e in evs if e.kind == "conn.open"] == ["initial"]      # it never reconnects


def test_a_freeze_that_ends_loses_nothing_for_a_client_that_waits(naive):
    # the proxy kept both TCP ends up, so the twin kept the session: once it forwards again the old
    # socket carries the late reply and the status question is answered on it
    run, v, _ = naive["r2-freeze"]
    got = status(v)
    assert v["pass"] and got["conversation_back"] == got["last_line_answered"] == got["truthful_claims"] == "pass", got
