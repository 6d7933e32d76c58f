"""Framework clients in Compose: the client image holds the framework's pinned venv, so the lab's
own framework app and a user's agent run in the client container with the same verdicts as in
network namespaces.

`--client adk` passes control in Compose as it does in netns (test_frameworks); the ADK example
(examples/table_reservation, unmodified) loads from the user's folder mounted at /app, reaches the
twin in the endpoint container by the API's real hostname, and its module is checked in the image
before anything starts. The LiveKit example (examples/order_support) goes through L1 in Compose as
it does in netns: its own `request_refund` runs in the client container, once, and its result
reaches the twin by the call's id across the goAway. The image is built under this test's own tag.
"""
import json
import os
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.events import read_events
from tests.e2e.docker_needed import docker_or_skip

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TAG = "frameworks-e2e"


@pytest.fixture(autouse=True)
def _own_tag(monkeypatch):
    docker_or_skip()
    monkeypatch.setenv("LAB_IMAGE_TAG", os.environ.get("LAB_E2E_IMAGE_TAG", TAG))


def test_the_lab_adk_app_passes_control_in_compose(tmp_path):
    from lab.run import run_batch
    lines: list[str] = []
    batch = run_batch(["control"], client="adk", topology="compose", out_dir=tmp_path / "b", out=lines.append)
    run = batch / "control-adk-01"
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["met"], (verdict.get("expectations"), lines[-25:])
    assert "google-adk 2.13.0" in (run / "client.log").read_text()


def test_a_users_adk_agent_runs_in_the_client_container(monkeypatch, tmp_path):
    from lab.run import run_batch
    monkeypatch.chdir(ROOT / "examples" / "table_reservation")
    with pytest.raises(LabError, match="has no attribute 'nope'"):     # checked in the image, nothing started
        run_batch(["control"], client="adk:table_reservation:nope", topology="compose", out_dir=tmp_path / "x",
                  out=lambda s: None)
    assert not (tmp_path / "x").exists()
    lines: list[str] = []
    batch = run_batch(["control"], client="adk:table_reservation", topology="compose", out_dir=tmp_path / "b",
                      out=lines.append)
    run = batch / "control-adk-table-reservation-01"
    assert "table_reservation:root_agent (table_reservation)" in (run / "client.log").read_text(), lines[-20:]
    ended = [e for e in read_events(run / "events.jsonl") if e.kind == "run.end"]
    assert ended and ended[0].get("status") == "ok", lines[-20:]
    twin = [json.loads(ln) for ln in (run / "twin.jsonl").read_text().splitlines() if ln.strip()]
    assert any(r["kind"] == "twin.setup" for r in twin) and any(r["kind"] == "twin.tool_call" for r in twin)


def test_the_livekit_example_keeps_its_refund_through_a_goaway_in_compose(monkeypatch, tmp_path):
    from lab.run import run_batch
    monkeypatch.chdir(ROOT / "examples" / "order_support")
    with pytest.raises(LabError, match="has no attribute 'Nope'"):      # checked in the image, nothing started
        run_batch(["l1-goaway"], client="livekit:agent:Nope", topology="compose", out_dir=tmp_path / "x",
                  conversation="lines.txt", out=lambda s: None)
    assert not (tmp_path / "x").exists()
    lines: list[str] = []
    batch = run_batch(["l1-goaway"], client="livekit:agent:OrderSupport", topology="compose",
                      out_dir=tmp_path / "b", conversation="lines.txt", out=lines.append)
    run = batch / "l1-goaway-livekit-agent-ordersupport-01"
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["met"], (verdict.get("failed"), lines[-25:])
    twin = [json.loads(ln) for ln in (run / "twin.jsonl").read_text().splitlines() if ln.strip()]
    calls = [r for r in twin if r["kind"] == "twin.tool_call" and r["name"] == "request_refund"]
    assert len(calls) == 1 and calls[0]["args"]["order_id"] == "A1002", calls
    answered = [r for r in twin if r["kind"] == "twin.tool_response" and r["id"] == calls[0]["id"]]
    assert answered and answered[0]["known"], answered
    assert any(r["kind"] == "twin.goaway" for r in twin), [r["kind"] for r in twin]
    # the agent's own tool ran in the client container and returned what the agent's code returns
    assert "'refund_id': 'R-A1002'" in (run / "client.log").read_text()


def test_the_lab_livekit_app_speaks_openai_in_compose_by_hostname(tmp_path):
    """The client image's pinned livekit venv holds livekit-plugins-openai (scripts/peers-setup.sh pins
    both plugins): with --protocol openai the app runs its OpenAI realtime model, which dials
    api.openai.com; the client container's /etc/hosts and system store send that name to the twin in
    the endpoint container, listening on 443."""
    from lab.run import run_batch
    lines: list[str] = []
    batch = run_batch(["control"], client="livekit", topology="compose", out_dir=tmp_path / "b", out=lines.append,
                      protocol="openai")
    run = batch / "control-livekit-01"
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["protocol"] == "openai" and verdict["pass"], (verdict.get("failed"), lines[-25:])
    assert "livekit-plugins-openai 1.8.9, model gpt-realtime" in (run / "client.log").read_text()
    twin = [json.loads(ln) for ln in (run / "twin.jsonl").read_text().splitlines() if ln.strip()]
    start = next(r for r in twin if r["kind"] == "twin.start")
    assert start["profile"] == "openai-realtime" and start["port"] == 443
    call = next(r for r in twin if r["kind"] == "twin.tool_call")
    answered = [r for r in twin if r["kind"] == "twin.tool_response" and r["id"] == call["id"]]
    assert call["name"] == "book_slot" and answered and answered[0]["status"] == "booked", answered
