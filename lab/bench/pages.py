"""`lab bench report RUN_DIR`: what writing report.html adds to a run's report. Prints figures only.

The run folder's records (everything but what the report writes) are copied to a fresh run folder
for every call, as `lab run` reports into a new folder (RUN_DIR itself is left as it is). The cases:

    no page      build_run(run, page=False)       the verdict, verdict.json and timeline.png
    page         build_run(run, batch=batch)      and report.html as `lab run` writes it: in a batch
                                                  whose plotly.min.js is there (after its first run)
    page alone   build_run(run)                   and report.html of a run folder alone (the script inline)

After one warm-up round (the imports of matplotlib and plotly's files, which `lab run` does while
the scenario plays), `-n` rounds interleaved, so that each case sees the same load on the machine.
Then `--cold` rounds of each case as the first report of a fresh process that has imported what
`lab run` preloads (what the first run of a batch pays).

The baseline is `no page`, measured in the same rounds: each page's cost prints as the difference
of the medians and as their ratio, in wall time and in this process's CPU time (the machine may be
shared: CPU time is what other load disturbs least); and, as the picture's drawing varies more than
the page costs, run_page.write timed by itself. Also each page's size on disk and what a batch
of `--runs` runs weighs in pages (with its one plotly.min.js).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.errors import LabError
from lab.report.page import RUN_PAGE
from lab.report.verdict import build_run, is_run_dir

WRITTEN = {RUN_PAGE, "verdict.json", "timeline.png"}    # what build_run writes: not copied
CASES = ("no page", "page", "page alone")


def _copy_records(run_dir: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for p in run_dir.iterdir():
        if p.is_file() and p.name not in WRITTEN and not p.name.endswith(".tmp"):
            shutil.copy2(p, dest / p.name)
    return dest


def _timed(fn) -> tuple[float, float]:
    """(wall ms, CPU ms) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return (time.perf_counter() - w0) * 1000, (time.process_time() - c0) * 1000


def _build(case: str, run: Path) -> None:
    if case == "no page":
        build_run(run, page=False)
    elif case == "page":
        build_run(run, batch=run.parent)
    else:
        build_run(run)


def _cold(case: str, run_dir: str) -> None:
    """In a fresh process: the preloads of `lab run`, then one timed report; prints (wall, CPU) ms."""
    # here, not at the top: these are the imports whose cost a cold process is to include
    import lab.report.run_page  # noqa: F401
    import lab.report.timeline  # noqa: F401
    print(json.dumps(_timed(lambda: _build(case, Path(run_dir)))))


def _cold_round(case: str, run: Path) -> tuple[float, float]:
    code = f"from lab.bench.pages import _cold; _cold({case!r}, {str(run)!r})"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise LabError(f"the cold round failed: {p.stderr.strip().splitlines()[-1:]}")
    w, c = json.loads(p.stdout.strip().splitlines()[-1])
    return w, c


def _page_only(run_dir: Path, batch: Path, n: int) -> dict[str, list[tuple[float, float]]]:
    """run_page.write by itself, the verdict and records loaded once: the page's own cost, without
    the noise of the picture drawn around it."""
    # here, not at the top: the page module is what this measures, loaded after the warm-up
    from lab.report import run_page
    from lab.report.verdict import load_run, verdict_of
    events, meta, twin, notes = load_run(run_dir)
    v = verdict_of(events, meta, twin, run_id=run_dir.name, notes=notes)
    out: dict[str, list[tuple[float, float]]] = {"page": [], "page alone": []}
    for i in range(n + 1):
        for case in out:
            run = _copy_records(run_dir, batch / f"{run_dir.name}-{case.replace(' ', '-')}-{i:02d}")
            t = _timed(lambda: run_page.write(run, v, events, twin, batch_dir=batch if case == "page" else None))
            if i:
                out[case].append(t)
            shutil.rmtree(run)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lab bench report", description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path, help="a run folder (captures/<batch>/<run-id>)")
    ap.add_argument("-n", type=int, default=7, help="rounds (default 7), after one warm-up")
    ap.add_argument("--cold", type=int, default=3, help="rounds in fresh processes (default 3; 0: none)")
    ap.add_argument("--runs", type=int, default=1000, help="the batch size to weigh the pages for (default 1000)")
    args = ap.parse_args(argv or [])
    run_dir: Path = args.run_dir
    if not run_dir.is_dir() or not is_run_dir(run_dir):
        raise LabError(f"not a run folder (no events.jsonl or run.json): {run_dir}")
    if args.n < 1 or args.cold < 0 or args.runs < 1:
        raise LabError(f"bad -n {args.n} / --cold {args.cold} / --runs {args.runs}: at least 1 / 0 / 1")
    tmp = Path(tempfile.mkdtemp(prefix="livelab-bench-report-"))
    times: dict[str, list[tuple[float, float]]] = {c: [] for c in CASES}
    cold: dict[str, list[tuple[float, float]]] = {c: [] for c in CASES}
    sizes: dict[str, int] = {}
    shared = 0
    try:
        # every case's run folder sits in a batch folder of its own, which keeps its plotly.min.js
        # from round to round as a batch does from run to run; "page alone" is reported on its own
        for i in range(args.n + 1 + args.cold):     # round 0 is the warm-up: imports, caches
            for case in CASES:
                run = _copy_records(run_dir, tmp / case.replace(" ", "-") / f"{run_dir.name}-{i:02d}")
                if i == 0:
                    _build(case, run)
                elif i <= args.n:
                    times[case].append(_timed(lambda: _build(case, run)))
                else:
                    cold[case].append(_cold_round(case, run))
                if (run / RUN_PAGE).is_file():
                    sizes[case] = (run / RUN_PAGE).stat().st_size
                shutil.rmtree(run)
        page_only = _page_only(run_dir, tmp / "page-only", args.n)
        script = tmp / "page" / "plotly.min.js"
        shared = script.stat().st_size if script.is_file() else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    events = sum(1 for _ in (run_dir / "events.jsonl").open()) if (run_dir / "events.jsonl").is_file() else 0
    print(f"report bench: {run_dir} ({events} events), {args.n} rounds interleaved + {args.cold} in fresh "
          "processes, median; baseline `no page` measured in the same rounds")
    print(f"{'case':>18} {'wall ms':>9} {'min':>7} {'max':>7} {'CPU ms':>8}")
    med: dict[str, tuple[float, float]] = {}
    for label, group in (("", times), (", cold", cold)):
        for case, t in group.items():
            if not t:
                continue
            ws = [w for w, _ in t]
            med[case + label] = (statistics.median(ws), statistics.median(c for _, c in t))
            print(f"{case + label:>18} {med[case + label][0]:>9.0f} {min(ws):>7.0f} {max(ws):>7.0f} "
                  f"{med[case + label][1]:>8.0f}")
    for label in ("", ", cold"):
        if f"no page{label}" not in med:
            continue
        base_w, base_c = med[f"no page{label}"]
        for case in CASES[1:]:
            w, c = med[case + label]
            print(f"{'cold: ' if label else ''}{case} adds {w - base_w:.0f} ms wall ({w / base_w:.2f}x no page), "
                  f"{c - base_c:.0f} ms CPU ({c / base_c:.2f}x)")
    print("the page by itself (run_page.write, records loaded once): " + ", ".join(
        f"{case} {statistics.median(w for w, _ in t):.1f} ms wall, {statistics.median(c for _, c in t):.1f} ms CPU"
        for case, t in page_only.items()))
    for case in CASES[1:]:
        print(f"report.html, {case}: {sizes[case]:,} bytes")
    if shared:
        batch = args.runs * sizes["page"] + shared
        print(f"a batch of {args.runs} runs: {batch / 1e6:,.1f} MB of pages with its one plotly.min.js "
              f"({shared:,} bytes), against {args.runs * sizes['page alone'] / 1e6:,.1f} MB with the script "
              f"in every page ({args.runs * sizes['page alone'] / batch:.0f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
