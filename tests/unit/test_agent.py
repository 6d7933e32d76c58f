"""The agent plays a timeline through lab.anchors and lab.actions, with a fake client and fault table.

No namespace and no root: the client is a stand-in that records what it is asked, and the fault
table only collects the faults the agent builds.
"""
from __future__ import annotations

import asyncio
import time

import pytest
import yaml

import lab.agent
from lab import scenario
from lab.agent import Agent
from lab.clients.base import Client, Endpoint
from lab.events import read_events
from lab.plan import RunPlan

SCRIPT = '''
name: t
duration: 20
script: ["Book me the 3pm slot tomorrow, please.", "Did you book it?"]
timeline:
'''


class FakeClient(Client):
    """Opens one 'session' at start; say() may record a refusal the test chooses."""
    name = "fake"
    refusal: dict | None = None
    actions_done: list[str] = []

    started = False

    async def start(self):
        FakeClient.started = True
        self.ctx.log.write("conn.open", src="client", conn=1, purpose="initial")
        self.ctx.log.write("conn.setup_complete", src="client", conn=1, setup_ms=1)

    async def say(self, text, line):
        self.ctx.log.write("user.say", src="client", conn=1, text=text, line=line, mode="text")
        if self.refusal:
            self.ctx.log.write("resume.result", src="client", attempt=1, conn=2, ok=False, **self.refusal)

    async def action(self, what, **kw):
        FakeClient.actions_done.append(what)

    def flow(self):
        return ("10.203.0.2", 40000, "10.203.0.1", 443)

    async def stop(self):
        pass


class FakeTable:
    def __init__(self):
        self.faults = []
        self.setup_before_start = None   # set up before the client started (None: never set up)

    def setup(self):
        self.setup_before_start = not FakeClient.started
        return self

    def add(self, fault):
        self.faults.append(fault)

    def clear_all(self):
        self.faults.clear()

    def close(self):
        self.faults.clear()


@pytest.fixture
def play(tmp_path, monkeypatch):
    monkeypatch.setattr(lab.agent, "get_client", lambda name: FakeClient)
    FakeClient.actions_done = []
    FakeClient.started = False
    runs = iter(range(100))

    def run(steps: str, refusal: dict | None = None, duration: float = 1.5):
        FakeClient.refusal = refusal
        scn = scenario.parse(yaml.safe_load(SCRIPT + steps), "t.yaml")
        run_dir = tmp_path / f"run{next(runs)}"
        run_dir.mkdir()
        plan = RunPlan(scenario="t.yaml", client="fake", run_dir=str(run_dir), duration=duration)
        agent = Agent(scn, plan, Endpoint(base_url="https://twin", api_key="k"), progress=lambda s: None)
        agent.table = run.table = FakeTable()
        t = time.monotonic()
        rc = asyncio.run(agent.run())
        return rc, read_events(run_dir / "events.jsonl"), time.monotonic() - t
    return run


def test_the_fault_table_is_set_up_before_the_client_starts_only_when_a_fault_is_on_the_timeline(play):
    # a run's first fault then costs a rule change at its anchor, not the table's set-up
    rc, _evs, _ = play("""
  - {at: setup_complete, fault: {kind: blackhole, target: flow}}
""")
    assert rc == 0 and play.table.setup_before_start is True
    rc, _evs, _ = play("""
  - {at: setup_complete, action: abort}
""")
    assert rc == 0 and play.table.setup_before_start is None


def test_the_first_cutting_action_is_the_only_loss(play):
    rc, evs, _ = play("""
  - {id: drop, at: setup_complete, action: abort}
  - {id: again, at: step:drop, action: resume}
  - {at: step:again, action: close}
""")
    assert rc == 0 and FakeClient.actions_done == ["abort", "resume", "close"]
    losses = [e for e in evs if e.kind == "loss"]
    assert [(e["how"], e["cuts_path"]) for e in losses] == [("action:abort", True)]
    assert [e["what"] for e in evs if e.kind == "action"] == ["abort", "resume", "close"]


def test_a_fault_is_the_loss_and_says_whether_it_cuts_the_path(play):
    rc, evs, _ = play("""
  - {id: f, at: setup_complete, fault: {kind: loss, p: 0.5, target: flow}}
  - {at: step:f, fault: {kind: blackhole, target: flow}}
""")
    assert rc == 0
    applied = [e["spec"] for e in evs if e.kind == "fault.apply"]
    assert applied[0]["target"] == {"src": "10.203.0.2", "sport": 40000, "dst": "10.203.0.1", "dport": 443}
    losses = [(e["how"], e["cuts_path"]) for e in evs if e.kind == "loss"]
    assert losses == [("fault:loss", False)]          # the degraded path came first: one loss, from it


def test_a_blackhole_cuts_the_path(play):
    _, evs, _ = play("  - {at: setup_complete, fault: {kind: blackhole, target: flow}}\n")
    assert [(e["how"], e["cuts_path"]) for e in evs if e.kind == "loss"] == [("fault:blackhole", True)]


def test_anchors_wait_for_their_event(play):
    # the loss anchor waits for the abort, the say waits for it
    _, evs, _ = play("""
  - {at: loss, say: 1}
  - {at: setup_complete, plus: 0.2, action: abort}
""")
    loss = next(e for e in evs if e.kind == "loss")
    say = next(e for e in evs if e.kind == "user.say")
    assert say.ms >= loss.ms >= 150


def test_an_auth_refusal_ends_the_run_at_once(play):
    rc, evs, took = play("  - {at: setup_complete, say: 0}\n",
                         refusal={"code": 1008, "reason": "API key not valid. Please pass a valid API key."},
                         duration=30)
    end = next(e for e in evs if e.kind == "run.end")
    assert rc == 4 and end["status"] == "error" and "refused the API key" in end["error"] and "\n" not in end["error"]
    assert took < 10, "the run should end at the refusal, not after its 30 s"


def test_a_quota_refusal_ends_it_too_but_the_studied_1011_does_not(play):
    rc, evs, _ = play("  - {at: setup_complete, say: 0}\n",
                      refusal={"code": 1011, "reason": "RESOURCE_EXHAUSTED: quota exceeded"}, duration=30)
    assert rc == 4 and "quota" in next(e for e in evs if e.kind == "run.end")["error"]
    rc, evs, _ = play("  - {at: setup_complete, say: 0}\n",
                      refusal={"code": 1011, "reason": "Internal error encountered."})
    assert rc == 0 and next(e for e in evs if e.kind == "run.end")["status"] == "ok"


class BlackBox(FakeClient):
    """An app the lab cannot drive: every scripted action is refused (lab.clients.command)."""
    askable = False

    async def action(self, what, **kw):
        from lab.clients.command import NotAskable
        raise NotAskable(f"cannot make it {what!r}")


def test_an_action_a_black_box_refuses_leaves_no_action_and_no_loss_only_its_step_error(play, monkeypatch):
    monkeypatch.setattr(lab.agent, "get_client", lambda name: BlackBox)
    rc, evs, _ = play("""
  - {id: drop, at: setup_complete, action: abort}
  - {id: close, at: step:drop, action: close}
""")
    assert rc == 0
    # the figures count from what the app did on its own: nothing says it aborted or closed
    assert not [e for e in evs if e.kind in ("action", "loss")]
    assert [(e["id"], e["unaskable"]) for e in evs if e.kind == "step.error"] == [("drop", "abort"), ("close", "close")]
