"""summary.md over a batch of runs, in the shape of the resume study's tables.

`summarize(batch_dir)` finds every run folder under `batch_dir` (a folder holding events.jsonl or
run.json; nested batches such as a soak's rounds are walked), reads each run's verdict.json (or
builds it when missing or older than the record), and writes `batch_dir/summary.md` (and report.html, the same batch in the browser: lab/report/batch_page.py):

1. per scenario and client: runs, passed, resume attempts / refused (codes), detection latency,
   loss -> resumed/new setupComplete, loss -> first audio (min-max, p50), bookings per run, and
   what the user was told against the backend's truth;
2. recovery figures: the fallback's breakdown (detection, resume window, new session setup, first
   audio after the restore) and the resume figures (first accepted resume after the loss, resume
   after the close);
3. the failed expectations, run by run, each with what to change (lab.report.advice);
4. the conformance rules each run failed (lab/report/rules.py), with what to change;
5. every run in one line.

Every figure whose value, against the twin, is one of the twin's own parameters echoed back carries
a mark (TWIN_MARK) and the legend under the title says so (origins: lab.metric_names).

Only metrics reach the summary: no handle, hash or key (the records hold none, and the summary
copies no raw field except the model's words).
"""
from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable

from lab import metric_names
from lab.errors import LabError
from lab.stats.order import percentile
from lab.report import arguments
from lab.report.verdict import VERDICT_FORMAT, build_run, is_run_dir, outcome, protocol_of, verdict_passed


TWIN_MARK = "\u2020"


def label(text: str, *metrics: str) -> str:
    """A column label, marked when any figure it shows is a twin input."""
    return text + (TWIN_MARK if any(metric_names.origin(m) == metric_names.TWIN_INPUT for m in metrics) else "")


_h = label   # the short name the tables below use


def legend() -> str:
    params = sorted({m.param for m in metric_names.METRICS.values() if m.param})
    return (f"{TWIN_MARK} a twin input echoed back: against the twin this figure is set by one of its profile "
            f"parameters ({', '.join(params)}), so agreeing with the study there is by construction, not a finding. "
            "Unmarked figures emerged from the run (kernel timers, the client's logic, real packets).")


def find_runs(root: Path | str) -> list[Path]:
    """Run folders at or under `root`, sorted by path."""
    root = Path(root)
    if is_run_dir(root):
        return [root]
    out: list[Path] = []
    for dirpath, dirnames, _ in os.walk(root):
        d = Path(dirpath)
        dirnames.sort()
        if d != root and is_run_dir(d):
            out.append(d)
            dirnames[:] = []  # a run folder holds no runs
    return sorted(out)


def runs_under(root: Path | str) -> list[Path]:
    """find_runs, or one clear LabError when `root` is missing, not a folder, or holds no run."""
    root = Path(root)
    if not root.exists():
        raise LabError(f"no such folder: {root}")
    if not root.is_dir():
        raise LabError(f"not a folder: {root}")
    runs = find_runs(root)
    if not runs:
        raise LabError(f"no run folders in {root} (a run folder holds events.jsonl or run.json)")
    return runs


def load_verdict(run_dir: Path, rebuild: bool = False, timeline: bool = False) -> dict[str, Any]:
    vp = run_dir / "verdict.json"
    newest = max((p.stat().st_mtime for p in (run_dir / "events.jsonl", run_dir / "run.json",
                                                 run_dir / "twin.jsonl") if p.is_file()), default=0)
    if not rebuild and vp.is_file() and vp.stat().st_mtime >= newest:
        try:
            v = json.loads(vp.read_text())
            if v.get("format") == VERDICT_FORMAT:   # an older verdict is rebuilt by today's rules
                return v
        except (json.JSONDecodeError, OSError, AttributeError):
            pass
    return build_run(run_dir, timeline=timeline)


def fmt_range(values: Iterable[Any], unit: str = "") -> str:
    """'min-max (p50 x)' in the study's style; one value alone; '-' for none."""
    vals = sorted(float(v) for v in values if v is not None)
    if not vals:
        return "-"
    f = (lambda v: f"{v:.0f}") if vals[-1] >= 100 or all(v == int(v) for v in vals) else (lambda v: f"{v:.1f}")
    if len(vals) == 1:
        return f"{f(vals[0])}{unit}"
    if vals[0] == vals[-1]:
        return f"{f(vals[0])}{unit} (all {len(vals)})"
    return f"{f(vals[0])}\u2013{f(vals[-1])}{unit} (p50 {f(percentile(vals, 50))})"


def _counts(c: Counter) -> str:
    if not c:
        return "-"
    return ", ".join(f"{k} \u00d7{v}" for k, v in sorted(c.items(), key=lambda kv: (-kv[1], str(kv[0]))))


def _cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def group_rows(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (scenario, client) with the study's columns, as strings."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for v in verdicts:
        groups[(v.get("scenario") or "?", v.get("client") or "-")].append(v)
    rows = []
    for (scen, client), vs in sorted(groups.items()):
        ms = [v["metrics"] for v in vs]
        attempts = sum(m["attempts"] for m in ms)
        refused = sum(m["refused"] for m in ms)
        codes: Counter = Counter()
        for m in ms:
            codes.update({k: v for k, v in m["refusal_codes"].items()})
        told = Counter(m["told"] for m in ms)
        truth = Counter((m["truth_at_answer"] or m["truth_final"]) for m in ms)
        answered = [m for m in ms if m["told_truth"] is not None]
        rows.append({
            "scenario": scen, "client": client,
            "runs": str(len(vs)),
            "passed": f"{sum(1 for v in vs if verdict_passed(v))} of {len(vs)}"
                      + (f" (reproduce {sum(1 for v in vs if v.get('reproduces'))})"
                         if any(v.get("reproduces") is not None for v in vs) else ""),
            "resumes": (f"{refused} of {attempts} refused" + (f" ({_counts(codes)})" if codes else "")
                        + (f", {sum(m['accepted'] for m in ms)} accepted" if any(m["accepted"] for m in ms) else ""))
            if attempts else "none",
            "detection": fmt_range(m["detection_ms"] for m in ms),
            "setup": fmt_range(m["loss_to_setup_ms"] for m in ms) + _missing(ms, "loss_to_setup_ms"),
            "audio": fmt_range(m["loss_to_first_audio_ms"] for m in ms) + _missing(ms, "loss_to_first_audio_ms"),
            "bookings": fmt_range(m["bookings"] for m in ms),
            "told": _counts(told).replace("never", "never told"),
            "truth": _counts(truth) + (f"; told the truth {sum(1 for m in answered if m['told_truth'])} of {len(ms)}"),
        })
    return rows


def _missing(ms: list[dict[str, Any]], key: str) -> str:
    n = sum(1 for m in ms if m[key] is None and m["loss_ms"] is not None)
    return f"; none in {n}" if n else ""


def render_summary(verdicts: list[dict[str, Any]], title: str) -> str:
    lines = [f"# {title}", ""]
    scen = {v.get("scenario") for v in verdicts}
    npass = sum(1 for v in verdicts if verdict_passed(v))
    nrep = [v for v in verdicts if v.get("reproduces") is not None]
    reproduced = (f"; {sum(1 for v in nrep if v['reproduces'])} of {len(nrep)} with reproduction rows reproduce the "
                  "study" if nrep else "")
    lines += [f"{len(verdicts)} runs in {len(scen)} scenarios, {npass} passed for the user{reproduced}. Generated by `lab report` from the "
              "run folders (a pure function of events.jsonl, twin.jsonl and run.json). Times in ms from the loss "
              "(the agent's loss event: the first fault start or path-cutting action); ranges are min\u2013max (p50).",
              "", f"Protocol: {', '.join(sorted({protocol_of(v) for v in verdicts})) or '-'} (the realtime API the "
              "twin and the clients spoke; lab run --protocol).", "", legend(), ""]

    lines += ["## Per scenario", "",
              f"| scenario | client | runs | passed | {_h('resume attempts (codes)', 'refusal_codes')} | "
              f"{_h('detection', 'detection_ms')} | {_h('loss → setupComplete', 'loss_to_setup_ms')} | "
              f"{_h('loss → first audio', 'loss_to_first_audio_ms')} | {_h('bookings per run', 'bookings')} | "
              "the user was told | backend truth |",
              "| --- | --- | ---: | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in group_rows(verdicts):
        lines.append("| " + " | ".join(_cell(r[k]) for k in ("scenario", "client", "runs", "passed", "resumes", "detection",
                                                           "setup", "audio", "bookings", "told", "truth")) + " |")
    lines.append("")

    # what the model said, one example per scenario and class
    quotes: dict[tuple[str, str], str] = {}
    for v in verdicts:
        m = v["metrics"]
        if m.get("answer_text"):
            quotes.setdefault((v.get("scenario") or "?", m["told"]), m["answer_text"])
    if quotes:
        lines += ["What the model answered to the status question (first example of each kind):", ""]
        for (s, cls), text in sorted(quotes.items()):
            lines.append(f"- {s}, {cls}: \u201c{_cell(text)}\u201d")
        lines.append("")

    lines += ["## Recovery figures", ""]
    fb = [v for v in verdicts if v["metrics"]["fallback"]]
    if fb:
        lines += ["Runs that fell back to a new session (the reference recovery pattern):", "",
                  f"| scenario | client | runs | {_h('detection', 'recovery.detection_ms')} | "
                  f"{_h('resume window', 'recovery.resume_window_ms')} | {_h('new session setup', 'recovery.new_setup_ms')} | "
                  f"{_h('restore → first audio', 'recovery.restore_to_first_audio_ms')} | "
                  f"{_h('loss → first audio', 'recovery.loss_to_first_audio_ms')} | re-issued calls | duplicate bookings |",
                  "| --- | --- | ---: | --- | --- | --- | --- | --- | --- | --- |"]
        g = _metrics_by_scenario_client(fb)
        for (s, c), ms in sorted(g.items()):
            rec = [m["recovery"] for m in ms]
            lines.append(f"| {_cell(s)} | {_cell(c)} | {len(ms)} | {fmt_range(r['detection_ms'] for r in rec)} | "
                         f"{fmt_range(r['resume_window_ms'] for r in rec)} | {fmt_range(r['new_setup_ms'] for r in rec)} | "
                         f"{fmt_range(r['restore_to_first_audio_ms'] for r in rec)} | "
                         f"{fmt_range(r['loss_to_first_audio_ms'] for r in rec)} | "
                         f"{sum(1 for m in ms if m['tool_calls_reissued'])} of {len(ms)} | "
                         f"{sum(m['duplicate_bookings'] for m in ms)} |")
        lines.append("")
        firsts: dict[tuple[str, str], tuple[str, int, int]] = {}
        for (s, c), ms in sorted(g.items()):
            for m in ms:
                if m["first_text_after_recovery"]:
                    cls = m["first_claim_after_recovery"]
                    n = sum(1 for x in ms if x["first_claim_after_recovery"] == cls)
                    firsts.setdefault((s, cls), (m["first_text_after_recovery"], n, len(ms)))
        for (s, cls), (text, n, total) in sorted(firsts.items()):
            lines.append(f"- {s}: first words after recovery {cls} in {n} of {total}, e.g. \u201c{_cell(text)}\u201d")
        if firsts:
            lines.append("")
    res = [v for v in verdicts if v["metrics"]["resumed"]]
    if res:
        lines += ["Runs with an accepted resume:", "",
                  f"| scenario | client | runs | {_h('refused before the accept', 'refused_before_accept')} | "
                  f"{_h('first accepted attempt after the loss', 'first_accept_after_loss_ms')} | "
                  f"{_h('accepted attempt latency', 'first_accept_latency_ms')} | "
                  f"{_h('resume after the close', 'resumed_after_close_ms')} | pending call answered after resume |",
                  "| --- | --- | ---: | --- | --- | --- | --- | --- |"]
        g = _metrics_by_scenario_client(res)
        for (s, c), ms in sorted(g.items()):
            pend = [m["pending_call_answered_after_resume"] for m in ms if m["pending_call_answered_after_resume"] is not None]
            lines.append(f"| {_cell(s)} | {_cell(c)} | {len(ms)} | {fmt_range(m['refused_before_accept'] for m in ms)} | "
                         f"{fmt_range(m['first_accept_after_loss_ms'] for m in ms)} | "
                         f"{fmt_range(m['first_accept_latency_ms'] for m in ms)} | "
                         f"{fmt_range(m['resumed_after_close_ms'] for m in ms)} | "
                         f"{(str(sum(pend)) + ' of ' + str(len(pend))) if pend else '-'} |")
        lines.append("")
    refusals = [a["latency_ms"] for v in verdicts for a in v["metrics"]["resume_attempts"] if a["outcome"] == "refused"]
    if refusals:
        lines += [f"Each refusal came {fmt_range(refusals, ' ms')} after its attempt started"
                  f"{_h('', 'refusal_latency_ms')} (n={len(refusals)}).", ""]
    if not (fb or res or refusals):
        lines += ["No run recovered and no resume was refused.", ""]

    failed = [v for v in verdicts if not verdict_passed(v) or v.get("reproduces") is False]
    lines += ["## Failed runs", "",
              "A run fails for its user when a user outcome failed; a run with reproduction rows (the study's "
              "client, or one the scenario names) also says whether it reproduces the study. What a run is held "
              "to (and `lab run` exits on) is marked: the study's own client is held to reproducing it.", ""]
    if not failed:
        lines += ["None.", ""]
    for v in failed:
        users = [f"user outcome {n}: {o.get('observed')}" for n, o in (v.get("outcomes") or {}).items()
                 if o.get("status") == "fail"]
        rows = [f"{'reproduction' if r.get('kind') == 'reproduction' else 'expectation'} {r['name']}: expected "
                f"{r['expected']}, observed {r['observed']}" + (f" ({r['note']})" if r.get("note") else "")
                for r in v["expectations"] if r["held"] is False]
        # the run's own reasons first (a truncated record, an interruption), each failed row after;
        # a verdict of before `reasons` has them among its notes
        why = v.get("reasons", [] if users or rows else v.get("notes", [])) + users + rows
        held = " [held to: reproduction]" if v.get("held_to") == "reproduction" else ""
        lines.append(f"- {v['run_id']} ({v.get('scenario')}){held}: " + "; ".join(_cell(w) for w in why))
        advice = ([o["advice"] for o in (v.get("outcomes") or {}).values() if o.get("advice")]
                  + [r["advice"] for r in v["expectations"] if r.get("advice")] + ([v["advice"]] if v.get("advice") else []))
        for text in advice:
            lines.append(f"  - {_cell(text)}")
    lines.append("")

    lines += _rule_failures(verdicts)

    defaulted = [(v, d) for v in verdicts for d in v.get("defaulted_args") or []]
    if defaulted:
        lines += ["## Arguments the lines did not give", "",
                  "The twin's model called a tool with a default for an argument the user's line did not name: "
                  "the agent answered a question nobody asked. Say the value in the line (a place after \"in\", "
                  "a name after \"for\", a quoted value), or give it in the conversation file.", ""]
        lines += [f"- {_cell(v['run_id'])}: {_cell(text)}" for v, d in defaulted
                  for text in arguments.describe([d])]
        lines.append("")

    unchecked = sorted({r["name"] for v in verdicts for r in v["expectations"] if r["held"] is None})
    if unchecked:
        lines += [f"Expectations not checked by this report: {', '.join(unchecked)}.", ""]

    lines += ["## Runs", "", "| run | scenario | client | for the user | reproduces the study | attempts / refused | told "
              "| truth | bookings |", "| --- | --- | --- | --- | --- | --- | --- | --- | ---: |"]
    for v in verdicts:
        m = v["metrics"]
        rep = {True: "yes", False: "NO", None: "-"}[v.get("reproduces")]
        mark = " (held to)" if v.get("held_to") == "reproduction" else ""
        lines.append(f"| {_cell(v['run_id'])} | {_cell(v.get('scenario'))} | {_cell(v.get('client') or '-')} | "
                     f"{ {'PASS': 'pass', 'INTERRUPTED': 'interrupted'}.get(outcome(v), 'FAIL')} | {rep}{mark} | "
                     f"{m['attempts']} / {m['refused']} | {m['told']} | "
                     f"{m['truth_at_answer'] or m['truth_final']} | {m['bookings']} |")
    lines.append("")
    return "\n".join(lines)


def _rule_failures(verdicts: list[dict[str, Any]]) -> list[str]:
    """The conformance rules each run failed, with what to change (lab.report.advice)."""
    failed = [(v, name, r) for v in verdicts for name, r in (v.get("rules") or {}).items() if r.get("status") == "fail"]
    lines = ["## Conformance rules failed", ""]
    if not failed:
        return lines + ["None." if any(v.get("rules") for v in verdicts) else "Not judged (verdicts without rules).", ""]
    for v, name, r in failed:
        lines.append(f"- {_cell(v['run_id'])}, `{name}`: {_cell(r.get('advice') or r.get('observed'))}")
    return lines + [""]


def _metrics_by_scenario_client(verdicts: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The runs' metrics grouped as the summary's tables show them: one row per scenario and client."""
    g: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for v in verdicts:
        g[(v.get("scenario") or "?", v.get("client") or "-")].append(v["metrics"])
    return g


def summarize(batch_dir: Path | str, rebuild: bool = False, timeline: bool = False) -> Path:
    """Write batch_dir/summary.md over every run under it; returns its path."""
    batch_dir = Path(batch_dir)
    runs = runs_under(batch_dir)
    verdicts = []
    for r in runs:
        v = load_verdict(r, rebuild=rebuild, timeline=timeline)
        v["run_id"] = str(r.relative_to(batch_dir)) if r != batch_dir else r.name
        verdicts.append(v)
    out = batch_dir / "summary.md"
    title = f"livelab summary: {batch_dir.name}"
    out.write_text(render_summary(verdicts, title))
    if runs != [batch_dir]:     # a run folder alone keeps its own report.html (lab/report/run_page.py)
        # here, not at the top: the batch page builds on the matrix's cells, and lab.report.conformance
        # reads the verdicts through this module
        from lab.report import batch_page
        batch_page.write_batch(batch_dir, [(v["run_id"], r, v) for r, v in zip(runs, verdicts)], title)
    return out
