"""`lab bench report RUN_DIR`: what writing report.html adds to a run's report. Prints figures only.

The run folder's records (everything but what the report writes) are copied to a fresh temporary
batch folder for every call, as `lab run` reports into a new folder (and RUN_DIR itself is left as
it is). After one warm-up (the imports of matplotlib and
plotly, which `lab run` does while the scenario plays), `-n` rounds, interleaved so that each case
sees the same load on the machine:

    no page   build_run(run, page=False)   the verdict, verdict.json and timeline.png
    page      build_run(run)               the same and report.html, as `lab run` writes it

Then `--cold` rounds (default 3) of each case as the first report of a fresh process that has
imported what `lab run` preloads while the scenario plays (what the first run of a batch pays).

The baseline is `no page`, measured in the same rounds: the page's cost prints as the difference of
the medians and as their ratio, in wall time and in this process's CPU time (the machine may be
shared: CPU time is what other load disturbs least). Also the page's size on disk.
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


def _cold(run_dir: str, page: bool) -> None:
    """In a fresh process: the preloads of `lab run`, then one timed build_run; prints (wall, CPU) ms."""
    # here, not at the top: these are the imports whose cost a cold process is to include
    import lab.report.run_page  # noqa: F401
    import lab.report.timeline  # noqa: F401
    print(json.dumps(_timed(lambda: build_run(Path(run_dir), page=page))))


def _cold_round(run_dir: Path, dest: Path, page: bool) -> tuple[float, float]:
    run = _copy_records(run_dir, dest / run_dir.name)
    code = f"from lab.bench.pages import _cold; _cold({str(run)!r}, {page!r})"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    shutil.rmtree(dest)
    if p.returncode != 0:
        raise LabError(f"the cold round failed: {p.stderr.strip().splitlines()[-1:]}")
    w, c = json.loads(p.stdout.strip().splitlines()[-1])
    return w, c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lab bench report", description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path, help="a run folder (captures/<batch>/<run-id>)")
    ap.add_argument("-n", type=int, default=7, help="rounds (default 7), after one warm-up")
    ap.add_argument("--cold", type=int, default=3, help="rounds in fresh processes (default 3; 0: none)")
    args = ap.parse_args(argv or [])
    run_dir: Path = args.run_dir
    if not run_dir.is_dir() or not is_run_dir(run_dir):
        raise LabError(f"not a run folder (no events.jsonl or run.json): {run_dir}")
    if args.n < 1:
        raise LabError(f"bad -n {args.n}: at least 1")
    tmp = Path(tempfile.mkdtemp(prefix="livelab-bench-report-"))
    try:
        cases = {"no page": lambda run: build_run(run, page=False), "page": lambda run: build_run(run)}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for i in range(args.n + 1):     # round 0 is the warm-up: imports, caches
            for name, fn in cases.items():
                # a fresh folder each time, as `lab run` writes into one (no page to replace)
                run = _copy_records(run_dir, tmp / f"{i}-{name}" / run_dir.name)
                t = _timed(lambda: fn(run))
                if i:
                    times[name].append(t)
                if name == "page":
                    size = (run / RUN_PAGE).stat().st_size
                shutil.rmtree(run.parent)
        cold: dict[str, list[tuple[float, float]]] = {f"{name}, cold": [] for name in cases}
        for i in range(args.cold):
            for name in cases:
                cold[f"{name}, cold"].append(_cold_round(run_dir, tmp / f"cold-{i}-{name}", name == "page"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    events = sum(1 for _ in (run_dir / "events.jsonl").open()) if (run_dir / "events.jsonl").is_file() else 0
    print(f"report bench: {run_dir} ({events} events), {args.n} rounds interleaved, median; baseline "
          "`no page` measured in the same rounds")
    med: dict[str, tuple[float, float]] = {}
    print(f"{'case':>16} {'wall ms':>9} {'min':>7} {'max':>7} {'CPU ms':>8}")
    for name, t in {**times, **cold}.items():
        if not t:
            continue
        ws = [w for w, _ in t]
        med[name] = (statistics.median(ws), statistics.median(c for _, c in t))
        print(f"{name:>16} {med[name][0]:>9.0f} {min(ws):>7.0f} {max(ws):>7.0f} {med[name][1]:>8.0f}")
    for suffix in ("", ", cold"):
        if f"page{suffix}" not in med:
            continue
        (base_w, base_c), (w, c) = med[f"no page{suffix}"], med[f"page{suffix}"]
        print(f"{'cold: ' if suffix else ''}the page adds {w - base_w:.0f} ms wall ({w / base_w:.2f}x no page), "
              f"{c - base_c:.0f} ms CPU ({c / base_c:.2f}x)")
    print(f"report.html {size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
