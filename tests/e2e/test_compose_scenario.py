"""Scenarios end to end through Docker Compose: the lab's main job in containers.

B1 (shortened) with the probe client: the client container's own kernel drops its connection's
packets, the twin in the endpoint container holds the session, and every resume is refused with
1011 while the booking commits. The run's folder must hold the same record as a namespace run:
events, the twin's log, the merged pcapng with the dropped packets, the verdict and the timeline.

R2 (the freeze proxy) in both topologies, with the same assertions: the proxy freezes only the
session's first tunnel, so every resume reaches the twin (refused with 1011 while the old
connection is open, accepted after its clean close). Before the services were shared, Compose's
proxy froze every tunnel and its resumes never reached the twin.
"""
import json

import pytest

from lab.events import read_events

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _run(tmp_path, scenario, topology, duration=None):
    from lab.run import run_batch

    lines: list[str] = []
    batch = run_batch([scenario], topology=topology, duration=duration, out_dir=tmp_path / "batch",
                      out=lines.append)
    run = next(d for d in batch.iterdir() if d.is_dir())
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["met"], (verdict["expectations"], lines[-25:])
    return run


def test_b1_through_compose(tmp_path):
    run = _run(tmp_path, "b1-silent-loss", "compose", duration=25)
    evs = read_events(run / "events.jsonl")
    results = [e for e in evs if e.kind == "resume.result"]
    assert results and all(e["code"] == 1011 for e in results)
    assert (run / "twin.jsonl").exists() and (run / "timeline.png").exists()

    from lab.capture import dropped
    assert dropped(run / "capture.pcapng"), "the dropped packets are in the capture"


@pytest.mark.netns
@pytest.mark.parametrize("topology", ["netns", "compose"])
def test_r2_freeze_freezes_only_the_first_tunnel_in_every_topology(tmp_path, topology):
    run = _run(tmp_path, "r2-freeze", topology)
    evs, twin = read_events(run / "events.jsonl"), read_events(run / "twin.jsonl")
    refused = [e for e in evs if e.kind == "resume.result" and not e["ok"]]
    accepted = [e for e in evs if e.kind == "resume.result" and e["ok"]]
    assert len(refused) >= 2 and all(e["code"] == 1011 for e in refused) and len(accepted) == 1
    # each resume went through a fresh tunnel and reached the twin: it refused each of them itself
    assert len([e for e in twin if e.kind == "twin.refuse" and e.get("code") == 1011]) == len(refused)
    assert len([e for e in twin if e.kind == "twin.accept" and e.get("resume")]) == 1
    # and on the run's clock: the twin's first refusal follows the client's detection of the freeze
    detected = next(e for e in evs if e.kind == "loss.detected")
    assert next(e for e in twin if e.kind == "twin.refuse").ms > detected.ms


def test_a_plain_app_by_hostname_is_locked_out_in_b1_through_compose(tmp_path, monkeypatch):
    """`--client-cmd` in Compose: the folder `lab run` starts from is mounted in the client
    container and the app's relative path works there; the container's own /etc/hosts and CA store
    send the real endpoint name to the twin. Judged from the twin's side, exactly as in netns."""
    from pathlib import Path

    from lab.run import run_batch
    from lab.topology.compose import REPO

    monkeypatch.chdir(REPO)
    hosts_before = Path("/etc/hosts").read_text()
    lines: list[str] = []
    batch = run_batch(["b1-silent-loss"], topology="compose", duration=25, out_dir=tmp_path / "batch",
                      out=lines.append, client_cmd="python tests/fixtures/plain_app.py")
    run = batch / "b1-silent-loss-cmd-01"
    verdict = json.loads((run / "verdict.json").read_text())
    # the study's lock-out reproduced, and the app's user left without a reply, as the probe's
    assert verdict["reproduces"] and not verdict["pass"], (verdict["expectations"], lines[-25:])
    assert {c["name"] for c in verdict["expectations"]} >= {"bookings", "all_resumes_refused", "refusal_code"}
    assert Path("/etc/hosts").read_text() == hosts_before       # the container's files, not the host's
    observed = [e for e in read_events(run / "events.jsonl") if e.src == "twin-observed"]
    refused = [e for e in observed if e.kind == "resume.result" and not e.get("ok")]
    assert refused and {e.get("code") for e in refused} == {1011}
    assert (run / "client.log").read_text().count("connected new") == 1


def test_a_support_app_with_only_its_lines_gets_refund_order_through_compose(tmp_path, monkeypatch):
    """`--conversation lines.txt` in Compose: the twin container loads the lines from the run folder
    and builds the tools from the support example's declarations, as in netns (test_support_app.py)."""
    from lab.run import run_batch
    from lab.topology.compose import REPO

    monkeypatch.chdir(REPO)
    out: list[str] = []
    batch = run_batch(["control"], topology="compose", out_dir=tmp_path / "batch", out=out.append,
                      client_cmd="env APP_REFUND_S=2 python examples/support/app.py",
                      conversation="examples/support/lines.txt")
    twin = read_events(batch / "control-cmd-01" / "twin.jsonl")
    assert next(e for e in twin if e.kind == "twin.conversation")["source"] == "lines"
    calls = [(e["name"], e["args"]) for e in twin if e.kind == "twin.tool_call"]
    assert calls == [("refund_order", {"order_id": "4417"})], out[-25:]


def test_an_app_that_plays_its_own_prompts_is_answered_by_what_it_said_through_compose(tmp_path, monkeypatch):
    """The twin in the endpoint container hears the app's own audio: "Hi, can you hear me?" said
    first is a greeting with no call, the booking line then the booking (as in netns,
    tests/integration/test_client_cmd.py)."""
    from lab.run import run_batch
    from lab.topology.compose import REPO

    monkeypatch.chdir(REPO)
    greeting, book = "Hi, can you hear me?", "Book me the 3pm slot tomorrow, please."
    out: list[str] = []
    batch = run_batch(["control"], topology="compose", duration=30, out_dir=tmp_path / "batch", out=out.append,
                      client_cmd=f'python tests/fixtures/prompt_app.py "{greeting}" "{book}"')
    run = batch / "control-cmd-01"
    twin = read_events(run / "twin.jsonl")
    assert next(e for e in twin if e.kind == "twin.start")["hears"] == "speech, by its words"
    heard = [(e["heard"].get("match"), e.get("tool")) for e in twin
             if e.kind == "twin.model" and e.get("source") == "speech"]
    # on a failure: what the app said it did, and when the run saw it connect
    said = (run / "client.log").read_text().splitlines()[-15:]
    seen = [(round(e.t, 1), e.kind) for e in read_events(run / "events.jsonl") if e.src == "twin-observed"][:8]
    assert heard == [(greeting, None), (book, "book_slot")], (said, seen)
