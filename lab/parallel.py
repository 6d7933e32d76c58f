"""Cells side by side: the scheduler `lab run -j N` and `lab matrix -j N` hand their runs to.

    cells = [Cell("control x probe 01", expected_s=30.0, run=lambda out: ...), ...]
    report = run_cells(cells, jobs=3, out=print, progress=sys.stderr)
    report.wall_s, report.cell_s (each cell's own time), report.results (in the cells' order)

A cell is one run (its own run folder, its own namespaces or Compose project: lab/run.py names them
from the run folder), so what cells share is only what the process shares: the one fork server
(whose spawn is thread-safe), the free-subnet choice (lab/topology/netns.py claims a subnet under
a lock, so two threads never pick the same one), the live budget's ledgers (files under flock, so a
cap holds across cells) and the report's drawing (lab/report/timeline.py draws under a lock:
pyplot's state is the process's).

With jobs=1 every cell runs in order in the caller's thread with the caller's `out`: exactly the
serial batch. With jobs>1 the longest expected cells start first (`start_order`), their starts
spaced by what each costs the cores (`Gate`), and a cell's own lines go to `<log>` (its run folder's lab.log) instead of the
terminal, where N cells' lines would interleave; the terminal gets one line per cell as it ends, and
the progress (cells done, running, left, the ETA) goes to `progress` (stderr).

A cell that raises stops the schedule: no further cell starts, those running finish (each tears its
own topology down), and the first error is raised; an error the caller names in `contain` stops
only the cells of the failing cell's group (a matrix: one client's, whose app cannot start). Ctrl-C
stops the schedule too; a second Ctrl-C leaves at once (`lab down` removes what the running cells
leave).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

# What one cell costs the machine, for -j auto. A cell mostly waits on the scenario's timers (a
# give-up, a refusal, a backoff): its twin, agent and capture use a fraction of a core between
# events, and most of its CPU is its start (docs/matrix.md says how it was measured). CELL_CORES:
# the share when there are no cells to weigh. A busy machine still gives the cells a fair share of
# its cores, the kernel's scheduler shares them among what is runnable, so the cores counted free are never fewer
# than BUSY_SHARE of them. The memory per cell is an assumption with a margin over a cell's twin,
# agent and capture.
CELL_CORES = 0.25
# What a cell's start costs, in seconds of a core: its twin, agent and capture coming up, and a
# framework app (or a user's app) importing its framework, inside the scenario's clock.
# An app starved of those seconds has not started when the scenario needs it, and its verdict then
# differs from the serial one; so starts are spaced (`Gate`), not counted as a core for the whole
# cell. The app's figure is measured (docs/matrix.md: a framework cell's CPU beyond a lab client's in
# the same scenario, with a margin), as is the lab cell's (most of its CPU is its start).
CELL_START_CPU_S = 2.0
APP_START_CPU_S = 4.0
# what a cell uses a second once started (twin, agent and capture streaming and waiting): measured, a
# 60 s B1 cell took 3.6 s of CPU in all, most of it its start (docs/matrix.md)
RUN_CORES = 0.025
BUSY_SHARE = 0.5
CELL_MEMORY_MIB = 400
MAX_AUTO = 8
# a cell's time beyond its scenario's duration (topology, services, teardown, report) before any
# cell has ended and shown the real figure: an assumption
DEFAULT_OVERHEAD_S = 15.0


@dataclass
class Cell:
    name: str                               # what the terminal calls it: "control x probe 01"
    run: Callable[[Callable[[str], None]], Any]   # run(out) -> the cell's result (its verdict)
    expected_s: float = 60.0                # the scenario's duration: the ETA's basis
    cores: float | None = None              # its share of a core, for -j auto (None: `share`)
    start_cpu_s: float = CELL_START_CPU_S   # seconds of a core its start takes: spaces the starts

    @property
    def share(self) -> float:
        """Its share of a core over its run: its start and what it uses a second after, over its
        expected time with the overhead (given `cores`, that)."""
        if self.cores is not None:
            return self.cores
        return (self.start_cpu_s + RUN_CORES * self.expected_s) / (self.expected_s + DEFAULT_OVERHEAD_S)
    log: Path | None = None                 # where its lines go when cells run side by side
    group: str | None = None                # cells that stand or fall together (one client's)
    describe: Callable[[Any], str] = str    # one line about its result, for the terminal


@dataclass
class Report:
    jobs: int
    wall_s: float = 0.0
    results: list[Any] = field(default_factory=list)    # in the cells' order; None: not run
    cell_s: list[float | None] = field(default_factory=list)
    stopped: dict[str, str] = field(default_factory=dict)   # group -> the error that stopped its cells

    @property
    def cells_s(self) -> float:
        """The cells' own run times, summed: what the schedule took serially, near enough."""
        return sum(s for s in self.cell_s if s is not None)

    @property
    def ratio(self) -> float:
        """Wall time over the cells' own summed time: what -j bought (1/jobs at best)."""
        return self.wall_s / self.cells_s if self.cells_s else float("nan")

    def figure(self) -> str:
        """Wall time against the cells' own summed time: the ratio is what -j bought."""
        ran = sum(1 for s in self.cell_s if s is not None)
        return (f"wall {self.wall_s:.1f} s, cells' own times summed {self.cells_s:.1f} s over {ran} cells, "
                f"ratio {self.ratio:.2f} (-j {self.jobs})")


@dataclass(frozen=True)
class Machine:
    cores: int
    load1: float
    available_mib: float


def machine() -> Machine:
    """Cores this process may use, the 1-minute load, the memory available (MemAvailable)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:      # not Linux
        cores = os.cpu_count() or 1
    avail = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) / 1024
    except OSError:
        pass
    return Machine(cores, os.getloadavg()[0], avail)


def auto_jobs(cells: int, m: Machine | None = None, share: float = CELL_CORES) -> tuple[int, str]:
    """N for `-j auto` and the one line saying why: the cores the machine's load leaves (at least
    BUSY_SHARE of them) over a cell's share of a core (`share`: the cells' mean), and the memory
    available over a cell's, whichever allows fewer."""
    m = m or machine()
    free = free_cores(m)
    by_cpu = max(1, int(free / share + 1e-9))
    by_mem = max(1, int(m.available_mib // CELL_MEMORY_MIB)) if m.available_mib else MAX_AUTO
    n = max(1, min(by_cpu, by_mem, MAX_AUTO, cells))
    why = (f"-j auto: {n} ({m.cores} cores at load {m.load1:.1f}: {free:.1f} counted free / {share:.2f} of a core "
           f"a cell = {by_cpu}; {m.available_mib / 1024:.1f} GiB available / {CELL_MEMORY_MIB} MiB a cell = {by_mem}; "
           f"at most {MAX_AUTO} and the {cells} cells; the smallest)")
    return n, why


def parse_jobs(value: str) -> int | str:
    """argparse type for -j: a positive whole number or `auto`."""
    import argparse     # here: only the CLI's parsing needs it
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"-j takes a whole number or auto, not {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError("-j must be at least 1")
    return n


def resolve_jobs(jobs: int | str, cells: list[Cell], out=print) -> int:
    """-j as given: `auto` is worked out here, from the cells' mean share of a core, and said in one line."""
    if jobs == "auto":
        share = sum(c.share for c in cells) / len(cells) if cells else CELL_CORES
        n, why = auto_jobs(len(cells), share=share)
        out(why)
        return n
    return int(jobs)


def _clock(s: float) -> str:
    s = max(0, int(round(s)))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class _Progress:
    """The counts and the ETA: what is left (a running cell: its expected time less what it has
    had) over the jobs, each expected time being the scenario's duration plus the overhead the
    ended cells showed on average."""

    def __init__(self, cells: list[Cell], jobs: int, stream: TextIO | None):
        self.cells, self.jobs, self.stream = cells, jobs, stream
        self.started: dict[int, float] = {}
        self.overheads: list[float] = []
        self.done = 0
        self.lock = threading.Lock()

    def _overhead(self) -> float:
        return sum(self.overheads) / len(self.overheads) if self.overheads else DEFAULT_OVERHEAD_S

    def eta(self, now: float) -> float:
        over = self._overhead()
        left = [c.expected_s + over for i, c in enumerate(self.cells) if i not in self.started]
        running = [max(0.0, self.cells[i].expected_s + over - (now - t)) for i, t in self.started.items()
                   if t is not None]
        return (sum(left) + sum(running)) / self.jobs

    def line(self, now: float) -> str:
        running = sum(1 for t in self.started.values() if t is not None)
        left = len(self.cells) - len(self.started)
        return f"progress: {self.done} done, {running} running, {left} left, ETA {_clock(self.eta(now))}"

    def start(self, i: int) -> None:
        with self.lock:
            self.started[i] = time.monotonic()
            self._say()

    def skip(self, i: int) -> None:
        with self.lock:
            self.started[i] = None      # type: ignore[assignment]  # never to run: not left any more

    def end(self, i: int, took: float) -> None:
        with self.lock:
            self.started[i] = None      # type: ignore[assignment]  # started, no longer running
            self.done += 1
            self.overheads.append(took - self.cells[i].expected_s)
            self._say()

    def _say(self) -> None:
        if self.stream is not None:
            print(self.line(time.monotonic()), file=self.stream, flush=True)


def _file_sink(path: Path | None, fallback: Callable[[str], None], lock: threading.Lock):
    if path is None:
        return (lambda line: _locked(fallback, lock, line)), (lambda: None)
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a", buffering=1)

    def sink(line: str) -> None:
        f.write(line + "\n")
    return sink, f.close


def _locked(fn, lock, line):
    with lock:
        fn(line)


class Gate:
    """Spaces the starts of side-by-side cells by what each start costs over the cores counted free:
    after a start costing c seconds of a core, the next waits c / free seconds. Eight framework apps
    started at once share the cores eight ways and none has imported its framework when its scenario
    speaks; spaced, each start has the cores it needs, and once the first wave is in, the cells
    ending at their own times keep the starts apart anyway, so the gate rarely waits after it."""

    def __init__(self, free_cores: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.free = max(free_cores, 0.25)
        self.clock, self.sleep = clock, sleep
        self.lock = threading.Lock()
        self.next_at = 0.0

    def wait(self, cell: Cell, stop: threading.Event | None = None) -> None:
        with self.lock:         # one start at a time through the gate: the next one's slot follows it
            delay = self.next_at - self.clock()
            while delay > 0 and not (stop is not None and stop.is_set()):
                self.sleep(min(delay, 0.5))
                delay = self.next_at - self.clock()
            self.next_at = self.clock() + cell.start_cpu_s / self.free


def free_cores(m: Machine | None = None) -> float:
    """The cores the machine's load leaves, never fewer than BUSY_SHARE of them (a lab cell mostly
    sleeps; the kernel shares a busy machine's cores among what is runnable)."""
    m = m or machine()
    return max(m.cores - m.load1, m.cores * BUSY_SHARE)


def start_order(cells: list[Cell]) -> list[int]:
    """The order side-by-side cells start in: the longest expected first (ties in the given order).
    Started in the given order, a long cell drawn last runs alone at the end while the other jobs
    sit idle; longest first, the last cells to start are the short ones, so the jobs end close
    together (Graham's LPT rule: within 4/3 of the best schedule). Results keep the given order."""
    return sorted(range(len(cells)), key=lambda i: -cells[i].expected_s)


def run_cells(cells: list[Cell], jobs: int = 1, out: Callable[[str], None] = print,
              progress: TextIO | None = sys.stderr, contain: tuple[type[BaseException], ...] = (),
              gate: Gate | None = None) -> Report:
    """Run every cell, at most `jobs` at once; see the module docstring. A cell raising one of
    `contain` stops only the cells of its group (they are skipped, the error's line kept in
    report.stopped[group]); any other error stops the schedule."""
    report = Report(jobs=max(1, jobs), results=[None] * len(cells), cell_s=[None] * len(cells))
    prog = _Progress(cells, report.jobs, progress if len(cells) > 1 else None)   # one run: nothing to count
    out_lock = threading.Lock()
    todo = start_order(cells) if report.jobs > 1 else list(range(len(cells)))
    todo_lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []
    gate = gate or (Gate(free_cores()) if report.jobs > 1 else None)

    def next_cell() -> int | None:
        with todo_lock:
            while todo and not stop.is_set():
                i = todo.pop(0)
                group = cells[i].group
                if group is not None and group in report.stopped:
                    prog.skip(i)
                    continue
                if gate is not None:    # under the lock: the cells pass the gate in start_order's order
                    gate.wait(cells[i], stop)
                    if stop.is_set():
                        prog.skip(i)
                        return None
                return i
            return None

    def run_one(i: int, side_by_side: bool) -> None:
        cell = cells[i]
        prog.start(i)
        sink, close = _file_sink(cell.log, out, out_lock) if side_by_side else (out, lambda: None)
        s = time.monotonic()
        try:
            report.results[i] = cell.run(sink)
        except contain as e:
            if cell.group is None:
                errors.append(e)
                stop.set()
            else:
                with todo_lock:
                    report.stopped.setdefault(cell.group, str(e))
                _locked(out, out_lock, f"== {cell.name}: {e}; the rest of {cell.group} is not run")
        except BaseException as e:     # handed to the caller: the schedule stops
            errors.append(e)
            stop.set()
        finally:
            close()
            report.cell_s[i] = took = time.monotonic() - s
            prog.end(i, took)
        if side_by_side and report.results[i] is not None:
            _locked(out, out_lock, f"== {cell.name}: {cell.describe(report.results[i])} ({took:.1f} s)"
                    + (f" [log: {cell.log}]" if cell.log else ""))

    def worker(side_by_side: bool) -> None:
        while (i := next_cell()) is not None:
            run_one(i, side_by_side)

    t0 = time.monotonic()
    try:
        if report.jobs == 1:
            worker(False)       # the serial batch: in order, in this thread, every line to `out`
        else:
            _side_by_side(worker, min(report.jobs, len(cells)), stop)
    finally:
        report.wall_s = time.monotonic() - t0
    if errors:
        raise errors[0]
    return report


def _side_by_side(worker, n: int, stop: threading.Event) -> None:
    threads = [threading.Thread(target=worker, args=(True,), name=f"lab-cell-{k}", daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.5)
    except KeyboardInterrupt:
        stop.set()
        running = sum(1 for t in threads if t.is_alive())
        print(f"lab: interrupted; no further cell starts, waiting for the {running} running to end and tear down "
              "(Ctrl-C again to leave now; `lab down` then removes what they leave)", file=sys.stderr, flush=True)
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.5)
        raise
