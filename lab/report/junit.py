"""JUnit XML of a batch, for a CI's test tab: `lab run|matrix|soak --junit-xml FILE`.

    write(batch_dir, out_file)      # every run under batch_dir (or the labelled `runs=`); returns out_file

One <testsuite> per run (its name the run's id), and in it one <testcase> for the run's verdict
(failed when the run did not meet what it is held to: its user's outcomes, or for the study's own
client reproducing the study; properties `held_to` and `reproduces` say which), one per user outcome
(`user.<name>`), one per reproduction row of its scenario (`reproduction.<name>`) and one per
conformance rule (`rule.<name>`), classname `livelab.<scenario>.<client>`. A failed outcome or row
carries a <failure> whose message is what the run showed and whose text adds the evidence and what to
change (lab.report.advice); a failed rule, the how-to behind the outcomes, is shown in its case's
<system-out> and not counted as a failure of its own; an n/a and an unchecked row are <skipped> with
the reason; a run whose record is broken (truncated, ended in an error) is an <error> of its verdict case. The format is the one Jenkins, GitLab and
GitHub's test reporters read (testsuites > testsuite > testcase); tests/fixtures/junit.xsd is that
format written as a schema, and the tests validate every file against it.

Also `step_summary(markdown)`: on GitHub Actions ($GITHUB_STEP_SUMMARY set) the batch's summary is
appended to the job's summary page.
"""
from __future__ import annotations

import os
import socket
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lab.report import advice as advice_mod
from lab.report.summary import load_verdict, runs_under
from lab.report.verdict import protocol_of, verdict_met

FAIL, NA = "fail", "n/a"    # lab.report.rules' outcome words, as the verdict stores them


def _case(suite: ET.Element, classname: str, name: str, seconds: float = 0.0) -> ET.Element:
    return ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds:.3f}")


def _failure(case: ET.Element, kind: str, message: str, text: str) -> None:
    f = ET.SubElement(case, "failure", message=message[:500], type=kind)
    f.text = text


def _skipped(case: ET.Element, reason: str) -> None:
    ET.SubElement(case, "skipped", message=reason[:500])


def run_suite(run_id: str, run_dir: Path, v: dict[str, Any]) -> ET.Element:
    """The <testsuite> of one run's verdict (expectation rows and rules with their advice)."""
    m = v.get("metrics") or {}
    cls = f"livelab.{v.get('scenario') or '?'}.{v.get('client') or '-'}"
    suite = ET.Element("testsuite", name=run_id, timestamp=_started(v), hostname=socket.gethostname())
    props = ET.SubElement(suite, "properties")
    for k in ("scenario", "client", "topology", "endpoint"):
        if v.get(k) is not None:
            ET.SubElement(props, "property", name=k, value=str(v[k]))
    ET.SubElement(props, "property", name="protocol", value=protocol_of(v))
    ET.SubElement(props, "property", name="dir", value=str(run_dir))
    seconds = float(m.get("duration_ms") or 0) / 1000.0
    case = _case(suite, cls, "verdict", seconds)
    broken = not m.get("complete") or str(m.get("status")).lower() in advice_mod.BROKEN_STATUS
    ET.SubElement(props, "property", name="held_to", value=str(v.get("held_to") or "user"))
    if v.get("reproduces") is not None:
        ET.SubElement(props, "property", name="reproduces", value=str(bool(v["reproduces"])).lower())
    if not verdict_met(v):
        held_to = v.get("held_to") or "user"
        failed = (v.get("not_reproduced") if held_to == "reproduction" else v.get("failed")) or []
        what = "not reproduced" if held_to == "reproduction" else "failed for the user"
        why = (f"{what}: " + ", ".join(failed)) if failed and not broken else "; ".join(v.get("notes") or []) or "did not pass"
        text = "\n".join([why] + ([v["advice"]] if v.get("advice") else []) + [f"run folder: {run_dir}"])
        if broken:      # the run itself did not finish: an error of the lab or the client, not a finding
            ET.SubElement(case, "error", message=why[:500], type="run").text = text
        else:
            _failure(case, "verdict", why, text)
    for name, o in (v.get("outcomes") or {}).items():
        case = _case(suite, cls, f"user.{name}")
        if o.get("status") == NA:
            _skipped(case, f"n/a: {o.get('observed')}")
        elif o.get("status") == FAIL:
            _failure(case, "user outcome", str(o.get("observed")), o.get("advice") or str(o.get("observed")))
    for r in v.get("expectations") or []:
        case = _case(suite, cls, f"reproduction.{r['name']}")
        evidence = (f"expected {r.get('expected')!r}, observed {r.get('observed')!r}"
                    + (f" ({r['note']})" if r.get("note") else "") + f" [origin: {r.get('origin')}]")
        if r.get("held") is None:
            _skipped(case, r.get("note") or "not checked")
        elif r.get("held") is False:
            a = r.get("advice") or _text(advice_mod.for_expectation(r, m))
            _failure(case, "expectation", evidence, f"{a}\n[origin: {r.get('origin')}]" if a else evidence)
    for name, o in (v.get("rules") or {}).items():
        # the rules are the how-to behind the user outcomes: a FAIL is shown, not counted as the run's failure
        case = _case(suite, cls, f"rule.{name}")
        if o.get("status") == NA:
            _skipped(case, f"n/a: {o.get('observed')}")
        elif o.get("status") == FAIL:
            a = o.get("advice") or _text(advice_mod.for_rule(name, o, m))
            ET.SubElement(case, "system-out").text = f"FAIL: {o.get('observed')}\n{a or ''}"
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    suite.set("time", f"{seconds:.3f}")
    out = ET.SubElement(suite, "system-out")
    out.text = f"run folder: {run_dir}\nreport: {run_dir / 'report.html'}\n"
    return suite


def _text(a: advice_mod.Advice | None) -> str:
    return a.text() if a is not None else ""


def _started(v: dict[str, Any]) -> str:
    t = v.get("started")
    if isinstance(t, (int, float)):
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if isinstance(t, str) and len(t) >= 19:
        return t[:19]
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def batch_runs(batch_dir: Path | str) -> list[tuple[str, Path]]:
    """(run id, folder) of every run under a batch, ids relative to it as summary.md names them."""
    batch_dir = Path(batch_dir)
    return [(str(r.relative_to(batch_dir)) if r != batch_dir else r.name, r) for r in runs_under(batch_dir)]


def build(runs: list[tuple[str, Path]], name: str) -> ET.Element:
    root = ET.Element("testsuites", name=name)
    for run_id, r in runs:
        root.append(run_suite(run_id, r, load_verdict(r)))
    for k in ("tests", "failures", "errors", "skipped"):
        root.set(k, str(sum(int(s.get(k, "0")) for s in root)))
    root.set("time", f"{sum(float(s.get('time', '0')) for s in root):.3f}")
    return root


def write(batch_dir: Path | str, out_file: Path | str, runs: list[tuple[str, Path]] | None = None) -> Path:
    """The JUnit file of every run under batch_dir (or of `runs`, labelled, e.g. several shards')."""
    out_file = Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    tree = ET.ElementTree(build(runs if runs is not None else batch_runs(batch_dir), f"livelab {Path(batch_dir).name}"))
    ET.indent(tree)
    tmp = out_file.with_name(out_file.name + ".tmp")
    tree.write(tmp, encoding="utf-8", xml_declaration=True)
    tmp.replace(out_file)
    return out_file


def step_summary(markdown: str) -> Path | None:
    """Append to the GitHub Actions job summary when $GITHUB_STEP_SUMMARY names a file; else None."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    with open(target, "a", encoding="utf-8") as f:
        f.write(markdown.rstrip() + "\n\n")
    return Path(target)


def publish(batch_dir: Path | str, junit_xml: Path | str | None = None, out=print) -> None:
    """What a CI reads after a batch: the JUnit file when asked for, and on GitHub Actions the batch's
    matrix.md (a matrix batch) or summary.md in the job summary."""
    batch_dir = Path(batch_dir)
    if junit_xml:
        out(f"== junit: {write(batch_dir, junit_xml)}")
    md = next((p for p in (batch_dir / "matrix.md", batch_dir / "summary.md") if p.is_file()), None)
    if md is not None and step_summary(md.read_text()) is not None:
        out(f"== job summary: {md.name} added to $GITHUB_STEP_SUMMARY")
