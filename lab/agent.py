"""The run agent: lives inside the client's network namespace and plays one scenario's timeline.

Client, faults and clock are in one process, so a fault lands a millisecond or two after its
anchor (a rule applied from here takes ~1.5 ms; `docker exec` would take ~70 ms). The agent writes
events.jsonl as things happen and prints one progress line per step and every few seconds, which
the orchestrator relays to the user. It always heals (clears every fault) on the way out, even on
an exception, SIGINT or SIGTERM.

Invoked by the orchestrator as `lab agent RUN_DIR/plan.json` inside the client's namespace (ip netns
exec, or docker compose exec): the plan (lab/plan.py) holds every setting of the run.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from netem.faults import build

from lab import actions, anchors, speech
from lab import plan as plan_mod
from lab import scenario as scenario_mod
from lab.backend import Backend
from lab.clients import get as get_client
from lab.clients import not_speaking
from lab.clients.base import ClientContext, Endpoint
from lab.clients.command import CommandClient, NotAskable
from lab.errors import ONE_LINE_ERRORS, LabError
from lab.events import Event, EventLog
from lab.live import errors as live_errors
from lab.live.budget import ConnectionCharger
from lab.topology.router import Router



class Agent:
    """One run's play of `scn` (as played: lab.scenario.played) with the settings of `plan`; the
    endpoint and the live budget's `before_connect` are the plan's, made live in this process."""

    def __init__(self, scn: scenario_mod.Scenario, plan: plan_mod.RunPlan, endpoint: Endpoint, progress=print,
                 before_connect=None):
        self.scn = scn
        self.plan = plan
        self.client_name = plan.client      # a user's app (plan.client_cmd) is judged as this client
        self.run_dir = Path(plan.run_dir)
        self.endpoint = endpoint
        self.duration = float(plan.duration or scn.duration)
        self._clock_started_s: float | None = None     # the log's time when the scenario's clock began
        # a router scenario: lab.topology.router's description of the run's router (its faults, the switch)
        self.router = Router.from_description(plan.router) if plan.router else None
        self.progress = progress
        self.before_connect = before_connect   # live runs: one session charged per connection opened
        self.log = EventLog(self.run_dir / "events.jsonl", t0=plan.t0)
        self.table = None       # netem.table.FaultTable, created lazily: a run with no fault needs no root
        self.client = None
        self.loss_ms: float | None = None
        self.steps_done: list[str] = []
        self._refusal = asyncio.Event()
        self._refusal_reason = ""
        self.log.subscribe(self._watch_refusals)

    # ---- anchors and the loss ----------------------------------------------------------------
    def _fires(self, anchor: str):
        """The anchor's predicate (lab.anchors) bound to this run's record and loss time."""
        pred = anchors.predicate(anchor)
        return lambda e: pred(e, self.log, self.loss_ms)

    def _mark_loss(self, how: str, cuts_path: bool) -> None:
        """Write the run's one `loss` event, at the first fault start or path-cutting action (lab.anchors)."""
        if self.loss_ms is None:
            self.loss_ms = self.log.write("loss", src="agent", how=how, cuts_path=cuts_path).ms

    # ---- a connection refused for auth or quota ends the run at once ---------------------------
    def _watch_refusals(self, e: Event) -> None:
        # lab.live.errors decides which records mean auth or quota (a plain 1011 refusal is what the
        # lab studies, not a reason to stop)
        stop = None if self._refusal.is_set() else live_errors.live_stop(e, self.plan.protocol)
        if stop is None and e.kind == "client.error" and e.get("task") == "start":
            stop = e.get("error")     # an app client that never ran (lab/clients/command.py)
        if stop is not None:
            self._refusal_reason = str(stop)
            self._refusal.set()

    def _faults(self, node: str = "client"):
        if node == "router":
            if self.router is None:
                raise LabError("a fault on the router, but this run has no router (topology: {router: true})")
            # the router's chains, hooked from FORWARD: its namespace's, or in Compose the router
            # service's in the router container (lab/topology/router_service.py)
            return self.router.table()
        if self.table is None:
            from netem.table import FaultTable  # lazy: the table needs root, a run with no fault does not
            # the agent handles SIGINT/SIGTERM itself (and heals in its finally), so the table must not
            self.table = FaultTable(handle_signals=False)
        return self.table

    def _prepare_tables(self, steps) -> None:
        """Set up, before t0's traffic, each fault table the timeline will use: its chains, its
        long-lived iptables-restore, and in Compose the connection to the router service, so a
        run's first fault costs what every later one does (a rule change) at its anchor."""
        for node in dict.fromkeys(s.fault.node for s in steps if s.fault is not None):
            self._faults(node).setup()

    def _proxy(self, verb: str) -> None:
        if not self.plan.proxy_control:
            raise LabError(f"action {verb!r} needs the freeze proxy (endpoint: {{via: proxy}})")
        req = urllib.request.Request(f"{self.plan.proxy_control.rstrip('/')}/{verb}", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            resp.read()

    def _twin(self, action: actions.Action) -> None:
        if not self.plan.twin_control:
            raise LabError(f"action {action.name!r} needs the twin's control channel (endpoint: twin)")
        req = urllib.request.Request(f"{self.plan.twin_control.rstrip('/')}/{action.verb}", method="POST",
                                     data=json.dumps(action.request_body()).encode(),
                                     headers={"Content-Type": "application/json"})
        # reached directly, whatever HTTP(S)_PROXY says
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=5) as resp:
            resp.read()

    async def _execute(self, step: scenario_mod.Step) -> None:
        if step.say is not None:
            await self.client.say(self.scn.script[step.say], step.say)
        elif step.fault is not None:
            spec = step.fault.netem_spec(self.client.flow(), self.plan.endpoint_ip)
            fault = build(spec)
            node = step.fault.node
            self._faults(node).add(fault)
            # a router fault's record says so in its spec, as the scenario wrote it; path: which way a
            # kind with two took effect (netem: kernel qdisc or userspace worker)
            self.log.write("fault.apply", src="agent", name=fault.name,
                           spec=spec if node == "client" else {**spec, "node": node},
                           **({"path": fault.path} if fault.path else {}))
            self._mark_loss(f"fault:{fault.kind}", fault.cuts_path)
        elif step.heal:
            if self.table is not None:
                self.table.clear_all()
            if self.router is not None:
                self.router.table().clear_all()
            self.log.write("fault.clear", src="agent", name="all")
        else:
            await self._act(actions.ACTIONS[step.action])

    async def _act(self, action: actions.Action) -> None:
        """One scripted action, by whoever performs it (lab.actions)."""
        if action.by == actions.PROXY:
            self._proxy(action.verb)    # first: a proxy that cannot act leaves no action in the record
        elif action.by == actions.TWIN:
            self._twin(action)
        elif action.by == actions.NETWORK and self.router is None:
            raise LabError(f"action {action.name!r} needs a router scenario (topology: {{router: true}})")
        if action.by == actions.CLIENT and not self.client.askable:
            # a black box refuses (NotAskable) before anything is recorded as done: no action event,
            # no loss, so the figures count from what the app did on its own
            await self.client.action(action.name)
        # a client action is recorded before the client acts: the loss is the moment it was told to drop
        self.log.write("action", src="agent", what=action.name)
        if action.cuts_path:
            self._mark_loss(f"action:{action.name}", True)
        if action.by == actions.CLIENT:
            await self.client.action(action.name)
        elif action.by == actions.NETWORK:
            moved = await self._switch(action.request_body())
            self.log.write("network.switch", src="agent", **moved)

    async def _switch(self, body: dict) -> dict:
        """Move the client between access links in a process of its own (lab.topology.router._main
        says why); the router's record of the switch comes back."""
        desc = self.router.describe()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "lab.topology.router", "switch", json.dumps(desc), body["to"], str(body["overlap_s"]),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise LabError(f"switch to {body['to']}: {(err.decode().strip().splitlines() or ['no message'])[-1]}")
        self.router.active = self.router.link(body["to"])
        return json.loads(out)

    async def _run_step(self, i: int, step: scenario_mod.Step) -> None:
        for anchor in step.ats:
            await self.log.wait_until(self._fires(anchor))
        if step.plus:
            await asyncio.sleep(step.plus)
        label = step.id or f"#{i}"
        try:
            await self._execute(step)
        except ONE_LINE_ERRORS:
            raise
        except Exception as e:  # a step that fails is recorded, and the run goes on to its end
            unaskable = {"unaskable": step.action} if isinstance(e, NotAskable) else {}
            self.log.write("step.error", src="agent", id=label, error=f"{type(e).__name__}: {e}", **unaskable)
            self.progress(f"[{self.log.now_ms() / 1000:7.1f}s] step {label} failed: {type(e).__name__}: {e}")
        self.log.write("step", src="agent", id=label, what=step.describe(), note=step.note)
        self.steps_done.append(label)
        self.progress(f"[{self.log.now_ms() / 1000:7.1f}s] {step.describe()}" + (f" ({step.note})" if step.note else ""))

    # ---- progress ------------------------------------------------------------------------------
    def _status_line(self) -> str:
        atts = self.log.find("resume.result")
        ok = sum(1 for e in atts if e.get("ok"))
        codes: dict[Any, int] = {}
        for e in atts:
            if not e.get("ok"):
                codes[e.get("code")] = codes.get(e.get("code"), 0) + 1
        refused = ", ".join(f"{n}x{c}" for c, n in codes.items()) or "none"
        el = self.log.now_ms() / 1000
        # the scenario's clock starts when the client has started (an app: at its first connection)
        left = self.duration - (el - self._clock_started_s) if self._clock_started_s is not None else self.duration
        return (f"[{el:7.1f}s] elapsed {el:.0f}s, remaining {max(0.0, left):.0f}s | "
                f"resume attempts {len(atts)} (ok {ok}, refused {refused}) | "
                f"bookings {len(self.log.find('backend.commit'))}")

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(10)
            self.progress(self._status_line())

    async def _end_condition(self, says_expected: int) -> None:
        if self.scn.end == "duration":
            await asyncio.sleep(self.duration)
            return

        def last_answered(e: Event) -> bool:
            says = self.log.find("user.say")
            return (len(says) >= says_expected and e.kind == "model.turn_complete"
                    and e.ms > says[-1].ms and bool(self.log.find("model.text")) and
                    self.log.find("model.text")[-1].ms > says[-1].ms)

        try:
            await self.log.wait_until(last_answered, timeout=self.duration)
            await asyncio.sleep(1.0)  # let the tail of the answer and any late frames land in the record
        except asyncio.TimeoutError:
            pass

    # ---- the run -------------------------------------------------------------------------------
    async def run(self) -> int:
        backend = Backend(self.log, commit_after_s=float(self.scn.backend.get("commit_after_s", 4.0)),
                          dedup=bool(self.scn.backend.get("dedup", True)))
        ctx = ClientContext(endpoint=self.endpoint, log=self.log, backend=backend,
                            params=self.scn.params_for(self.client_name), speech=self.scn.input == "speech",
                            before_connect=self.before_connect)
        plan = self.plan
        self.client = (CommandClient(ctx, plan.client_cmd, plan.endpoint_ip, plan.client_owns_files, plan.client_cwd,
                                     proxy=plan.proxy, protocol=plan.protocol) if plan.client_cmd
                       else get_client(self.client_name)(ctx))
        # a step of an action the run's protocol lacks (a resume with a handle in OpenAI) is not played
        steps = [s for s in self.scn.timeline if s.applies_to(self.client_name) and s.plays_in(plan.protocol)]
        says_expected = sum(1 for s in steps if s.say is not None)
        self.log.write("run.start", src="agent", scenario=self.scn.name, client=self.client_name,
                       **({"client_cmd": plan.client_cmd} if plan.client_cmd else {}),
                       duration=self.duration, endpoint=self.endpoint.base_url, speech=ctx.speech)
        self.progress(f"[    0.0s] {self.scn.name}: {self.scn.title} (client {self.client_name}, "
                      f"up to {self.duration:.0f}s)")
        status, error = "ok", None
        tasks: list[asyncio.Task] = []
        try:
            self._prepare_tables(steps)
            if ctx.speech:
                # each spoken line is made before the clock starts: espeak-ng is a subprocess the
                # client waits for, and on a busy machine a line made at its step held the client's
                # loop for seconds, its frames unread, just when the model was answering
                speech.prepare([self.scn.script[s.say] for s in steps if s.say is not None])
            await self.client.start()
            self._clock_started_s = self.log.now_ms() / 1000
            tasks = [asyncio.create_task(self._run_step(i, s)) for i, s in enumerate(steps)]
            tasks.append(asyncio.create_task(self._ticker()))
            ender = asyncio.create_task(self._end_condition(says_expected))
            refused = asyncio.create_task(self._refusal.wait())
            pending = set(tasks[:-1]) | {ender, refused}
            tasks += [ender, refused]
            while ender in pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    if t is refused:
                        raise LabError(self._refusal_reason)
                    if t is not ender and t.exception():
                        raise t.exception()
        except ONE_LINE_ERRORS as e:
            status, error = "error", str(e)
        except asyncio.CancelledError:
            status, error = "interrupted", "the run was interrupted"
        except Exception as e:
            status, error = "error", f"{type(e).__name__}: {e}"
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.heal()
            try:
                await asyncio.wait_for(self.client.stop(), 10)
            except Exception:
                pass
            not_reached = [s.describe() for i, s in enumerate(steps) if (s.id or f"#{i}") not in self.steps_done]
            self.log.write("run.end", src="agent", status=status, error=error, not_reached=not_reached,
                           bookings=len(backend.ledger()) if hasattr(backend, "ledger") else None)
            self.log.close()
        self.progress(self._status_line())
        self.progress(f"[{self.log.now_ms() / 1000:7.1f}s] run ended: {status}" + (f" ({error})" if error else ""))
        return 0 if status == "ok" else 4

    def heal(self) -> None:
        if self.router is not None:
            self.router.down()   # the router's faults go; its namespace goes with the topology
        if self.table is not None:
            try:
                self.table.close()   # clear every fault, then remove the lab's chains
                self.table = None
                self.log.write("fault.clear", src="agent", name="all", at_exit=True)
            except Exception as e:  # never mask the run's own outcome
                print(f"lab agent: heal failed: {e}", file=sys.stderr)


def add_parser(sub) -> None:
    p = sub.add_parser("agent", help="(internal) play a scenario inside the client's namespace")
    p.add_argument("plan", help=f"the run's plan (lab/plan.py), {plan_mod.FILE} in its run folder")
    p.set_defaults(func=_main)


GO_TIMEOUT_S = 120.0    # how long a started-early agent waits for its go before giving up
GO_POLL_S = 0.005       # the go file is looked for this often: the agent's start waits at most this long


def wait_for_go(path: Path, timeout_s: float = GO_TIMEOUT_S) -> None:
    """Block until `path` exists (the orchestrator's go); LabError if it does not come in time."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise LabError(f"no go from the orchestrator ({path}) within {timeout_s:.0f} s")
        time.sleep(GO_POLL_S)


def _main(args) -> int:
    plan = plan_mod.read(args.plan)
    scn = scenario_mod.load(plan.scenario)
    if plan.script is not None:     # the user's lines, as the orchestrator played the scenario
        scn = dataclasses.replace(scn, script=list(plan.script))
    if plan.go_file:
        # the orchestrator starts this process while the twin and capture start: pay the imports
        # (the client's SDK is most of them) now, and open nothing until the go
        if not plan.client_cmd:
            get_client(plan.client)
        wait_for_go(Path(plan.go_file))
    refused = None if plan.client_cmd else not_speaking(plan.client, plan.protocol)
    if refused:
        raise LabError(f"{args.plan}: {refused}")
    key = os.environ.get(plan_mod.KEY_ENV)
    if not key:
        raise LabError(f"no API key in ${plan_mod.KEY_ENV} for the agent")
    if plan.proxy:
        os.environ["HTTPS_PROXY"] = plan.proxy
        os.environ.pop("NO_PROXY", None)
        os.environ.pop("no_proxy", None)
    ep = Endpoint(base_url=plan.base_url, api_key=key, ca_path=plan.ca, model=plan.model, keylog_path=plan.keylog)
    run_dir = Path(plan.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    agent = Agent(scn, plan, ep, progress=lambda s: print(s, flush=True),
                  before_connect=(ConnectionCharger.from_ledger(plan.budget_ledger, run_dir.name)
                                  if plan.budget_ledger else None))

    async def main() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        return await agent.run()

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        agent.heal()
        return 130
