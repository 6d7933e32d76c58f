"""The `livelab` pytest plugin: put your agent under the lab's scenarios from your own test suite.

Installing the package is enough (entry point `livelab` in pyproject's `pytest11`):

    def test_my_agent_survives_a_silent_loss(livelab):
        run = livelab.run("b1-silent-loss", client_cmd="python my_agent.py", duration=25)
        assert run.passed, run.explain()

`livelab.run(scenario, client=None, client_cmd=None, conversation=None, topology="auto", **options)`
plays one run of `scenario` (a catalogue name or a file) through `lab run`'s own batch (so exactly
what `lab run` does: the topology, the twin, the capture, the verdict, report.html) into a folder
under the test's tmp path, and returns a `LabRun`: `passed` (what your agent's user got: each of the
verdict's user outcomes passed or was n/a, lab/report/outcomes.py), `outcomes`, `reproduces` (the
study's reproduction rows, for the study's own client; None for yours), `rules` (the how-to behind
the outcomes), `verdict`, `events`, `dir`, and `explain()`: each FAIL with what to change
(lab.report.advice), every row named by its kind. `options` are lab run's: duration, endpoint, base_url, model, ca.

Where this machine cannot run a lab (no root for network namespaces, no Docker for Compose) the
test is skipped, naming what is missing. A failed test's report lists its run folders and pages.
"""
from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

OPTIONS = ("duration", "endpoint", "base_url", "model", "ca")     # lab run's flags a test may set
FAIL = "fail"                                                     # lab.report.rules.FAIL


def _failed(judged: dict[str, dict[str, Any]]) -> list[str]:
    return [n for n, o in judged.items() if o.get("status") == FAIL]


@dataclass
class LabRun:
    """One run's results, read from its folder."""
    dir: Path
    verdict: dict[str, Any]
    log: list[str] = field(default_factory=list)

    @property
    def outcomes(self) -> dict[str, dict[str, Any]]:
        """Each user outcome: status (pass, fail, n/a), observed, and on a FAIL its advice and the rules behind it."""
        return self.verdict.get("outcomes") or {}

    @property
    def failed_outcomes(self) -> list[str]:
        return _failed(self.outcomes)

    @property
    def reproduces(self) -> bool | None:
        """Whether the study's reproduction rows all held; None when the scenario has none for this client."""
        return self.verdict.get("reproduces")

    @property
    def rules(self) -> dict[str, dict[str, Any]]:
        """Each conformance rule's outcome: status (pass, fail, n/a), observed, figure, and advice on a FAIL."""
        return self.verdict.get("rules") or {}

    @property
    def failed_rules(self) -> list[str]:
        return _failed(self.rules)

    @property
    def passed(self) -> bool:
        """What the user got held: the verdict's `pass` (its user outcomes; a failed rule is the advice
        behind a failed outcome, not a failure of its own)."""
        return bool(self.verdict.get("pass"))

    @property
    def events(self) -> list[Any]:
        """events.jsonl as lab.events.Event objects."""
        # here, not at the top: the plugin loads with every pytest session, the lab only for a run
        from lab.events import read_events
        p = self.dir / "events.jsonl"
        return read_events(p) if p.is_file() else []

    def explain(self) -> str:
        """Why the run did not pass, each FAIL with what to change; the folder and page to look at."""
        lines = [f"livelab: {self.verdict.get('scenario')} x {self.verdict.get('client')}: "
                 + ("passed for the user" if self.passed else "FAILED for the user")
                 + {True: "; reproduces the study", False: "; does not reproduce the study"}.get(self.reproduces, "")]
        lines += [f"- user outcome {n}: {self.outcomes[n].get('advice') or self.outcomes[n].get('observed')}"
                  for n in self.failed_outcomes]
        if self.verdict.get("advice"):
            lines.append(f"- the run: {self.verdict['advice']}")
        for r in self.verdict.get("expectations") or []:
            if r.get("held") is False:
                lines.append(f"- reproduction row {r['name']} (the study's client): {r.get('advice') or r.get('observed')}")
        lines += [f"- rule {n} (behind the outcomes): {self.rules[n].get('advice') or self.rules[n].get('observed')}"
                  for n in self.failed_rules]
        lines.append(f"run folder: {self.dir}  (report: {self.dir / 'report.html'})")
        return "\n".join(lines)


def cannot_run(topology: str) -> str | None:
    """Why no lab can run here for `topology` (naming what is missing), or None."""
    # here, not at the top: the topologies load only when a test asks for a run
    from lab.topology import AUTO
    netns = _netns_missing() if topology in (AUTO, "netns") else None
    if topology == "netns" or (topology == AUTO and netns is None):
        return f"the netns topology needs {netns}" if netns else None
    # here, as above: the compose topology's module asks Docker
    from lab.topology.compose import docker_missing
    docker = docker_missing()
    if docker is None:
        return None
    if topology == AUTO:
        return f"network namespaces need root ({netns}) and the compose topology needs Docker ({docker})"
    return f"the {topology} topology needs Docker ({docker})"


def _netns_missing() -> str | None:
    if os.geteuid() != 0:
        return "root (this is uid %d)" % os.geteuid()
    # here, not at the top: netem's probe only when asked
    from netem.kernel import Prober
    return None if Prober().can_make_netns() else "a kernel that lets root make network namespaces"


class LiveLab:
    """The `livelab` fixture: `run(...)` plays one run into the test's tmp folder."""

    def __init__(self, tmp_path: Path):
        self._tmp = tmp_path
        self.runs: list[LabRun] = []

    def run(self, scenario: str, client: str | None = None, client_cmd: str | None = None,
            conversation: str | os.PathLike | None = None, topology: str = "auto", **options: Any) -> LabRun:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"livelab.run: unknown option(s) {', '.join(unknown)} (known: {', '.join(OPTIONS)})")
        why = cannot_run(topology)
        if why:
            pytest.skip(f"livelab cannot run here: {why}")
        # here, not at the top: lab.run (the orchestrator) loads only for a run
        from lab.run import run_batch
        from lab.topology import choose
        kw: dict[str, Any] = {k: options[k] for k in OPTIONS if k in options}
        if conversation is not None:
            if "conversation" not in inspect.signature(run_batch).parameters:
                raise TypeError("livelab.run: conversation= needs a livelab whose `lab run` plays conversations")
            kw["conversation"] = str(conversation)
        log: list[str] = []
        out = self._tmp / f"livelab-{len(self.runs) + 1:02d}"
        batch = run_batch([str(scenario)], n=1, client=client, client_cmd=client_cmd,
                          topology=choose(topology, say=log.append), out_dir=out, out=log.append, **kw)
        (run_dir,) = [p for p in sorted(batch.iterdir()) if (p / "events.jsonl").is_file() or (p / "run.json").is_file()]
        # here: the verdict as the report room wrote it (verdict.json, the rules and their advice)
        from lab.report.summary import load_verdict
        result = LabRun(run_dir, load_verdict(run_dir), log)
        (out / "livelab.log").write_text("\n".join(log) + "\n")
        self.runs.append(result)
        return result


@pytest.fixture
def livelab(tmp_path: Path) -> LiveLab:
    """Play lab runs from a test: `livelab.run("b1-silent-loss", client_cmd="python my_agent.py")`."""
    return LiveLab(tmp_path)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    lab = getattr(item, "funcargs", {}).get("livelab")
    if report.when == "call" and report.failed and isinstance(lab, LiveLab) and lab.runs:
        report.sections.append(("livelab runs", "\n".join(
            f"{r.dir}  (report: {r.dir / 'report.html'}; log: {r.dir.parent / 'livelab.log'})" for r in lab.runs)))
