"""lab/parallel.py: the cell scheduler, -j auto, the ETA, and the netns subnet claim (no I/O but tmp files)."""
import threading
import time

import pytest

from lab import parallel
from lab.parallel import Cell, Gate, Machine, auto_jobs, free_cores, run_cells


@pytest.fixture(autouse=True)
def _starts_unspaced(monkeypatch):
    # these tests hold their cells for milliseconds: the gate's real spacing (seconds) is tested on
    # its own below (Gate, as imported), with a clock of its own
    monkeypatch.setattr(parallel, "Gate", lambda free, **kw: Gate(1e9, **kw))


class Gauge:
    """How many cells run at once, at most."""

    def __init__(self):
        self.now = self.most = 0
        self.lock = threading.Lock()

    def cell(self, result, hold=0.05):
        def run(out):
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)
            out(f"line of {result}")
            time.sleep(hold)        # long enough for the others to start: concurrency, not timing, is checked
            with self.lock:
                self.now -= 1
            return result
        return run


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_results_in_order_and_never_more_than_jobs_at_once(jobs, tmp_path):
    g = Gauge()
    cells = [Cell(f"c{i}", g.cell(i), log=tmp_path / f"c{i}.log") for i in range(7)]
    lines = []
    rep = run_cells(cells, jobs=jobs, out=lines.append, progress=None)
    assert rep.results == list(range(7))
    assert g.most <= jobs
    if jobs > 1:
        assert g.most > 1           # they did run side by side
    assert all(s is not None and s > 0 for s in rep.cell_s)
    assert rep.cells_s == pytest.approx(sum(rep.cell_s))


def test_serial_lines_go_to_out_parallel_lines_to_each_log(tmp_path):
    cells = [Cell(f"c{i}", Gauge().cell(i, 0), log=tmp_path / f"c{i}.log") for i in range(3)]
    lines = []
    run_cells(cells, jobs=1, out=lines.append, progress=None)
    assert lines == ["line of 0", "line of 1", "line of 2"]
    assert not any(tmp_path.iterdir())
    lines.clear()
    run_cells(cells, jobs=2, out=lines.append, progress=None)
    for i in range(3):
        assert (tmp_path / f"c{i}.log").read_text() == f"line of {i}\n"
    # the terminal gets one line per cell as it ends, naming its log
    assert sorted(l.split(":")[0] for l in lines) == ["== c0", "== c1", "== c2"]
    assert all("[log: " in l for l in lines)


def test_a_failing_cell_stops_the_schedule_and_its_error_is_raised():
    started = []

    def ok(i):
        def run(out):
            started.append(i)
            time.sleep(0.02)
            return i
        return run

    def boom(out):
        started.append("boom")
        raise RuntimeError("the app never ran")
    cells = [Cell("boom", boom)] + [Cell(f"c{i}", ok(i)) for i in range(20)]
    with pytest.raises(RuntimeError, match="the app never ran"):
        run_cells(cells, jobs=2, out=lambda _l: None, progress=None)
    assert len(started) < 21       # the rest were never started


def test_progress_counts_and_eta(tmp_path):
    cells = [Cell(f"c{i}", lambda out: None, expected_s=30.0) for i in range(4)]
    p = parallel._Progress(cells, jobs=2, stream=None)
    now = time.monotonic()
    # nothing ended yet: each cell is its scenario's time plus the assumed overhead, over the jobs
    assert p.eta(now) == pytest.approx(4 * (30 + parallel.DEFAULT_OVERHEAD_S) / 2)
    p.start(0)
    p.end(0, took=40.0)             # it showed 10 s of overhead
    p.start(1)
    p.started[1] = now - 20.0       # running for 20 s of its 40
    assert p.line(now) == "progress: 1 done, 1 running, 2 left, ETA 0m50s"   # (20 + 40 + 40) / 2


def test_auto_jobs_takes_the_smallest_bound_and_says_why():
    n, why = auto_jobs(50, Machine(cores=2, load1=1.5, available_mib=16000))
    # 2 cores at load 1.5 leave 0.5, but a busy machine counts half its cores: 1.0 / 0.25
    assert n == 4 and why.startswith("-j auto: 4 (2 cores at load 1.5: 1.0 counted free")
    assert auto_jobs(50, Machine(cores=2, load1=0.2, available_mib=16000))[0] == 7      # 1.8 free / 0.25
    assert auto_jobs(50, Machine(cores=2, load1=9.0, available_mib=16000))[0] == 4      # never below half
    assert auto_jobs(50, Machine(cores=16, load1=0.0, available_mib=1000))[0] == 2      # memory binds
    assert auto_jobs(3, Machine(cores=16, load1=0.0, available_mib=64000))[0] == 3      # no more than the cells
    assert auto_jobs(99, Machine(cores=64, load1=0.0, available_mib=640000))[0] == parallel.MAX_AUTO
    # a heavier share (a cell's own, given) allows fewer
    assert auto_jobs(20, Machine(cores=2, load1=0.0, available_mib=16000), share=1.0)[0] == 2


def test_resolve_jobs_weighs_the_cells_it_is_given(monkeypatch):
    monkeypatch.setattr(parallel, "machine", lambda: Machine(cores=2, load1=0.0, available_mib=16000))
    said = []
    light = [Cell("p", lambda out: None) for _ in range(10)]
    heavy = [Cell("f", lambda out: None, cores=1.0) for _ in range(10)]
    assert parallel.resolve_jobs("auto", light, said.append) == 8
    assert parallel.resolve_jobs("auto", heavy, said.append) == 2
    assert parallel.resolve_jobs(3, heavy, said.append) == 3 and len(said) == 2


def test_parse_jobs():
    import argparse
    assert parallel.parse_jobs("3") == 3 and parallel.parse_jobs("auto") == "auto"
    for bad in ("0", "-2", "many"):
        with pytest.raises(argparse.ArgumentTypeError):
            parallel.parse_jobs(bad)


def test_two_topologies_picking_at_once_never_share_a_subnet(monkeypatch):
    from lab.topology import netns

    def slow_scan():
        time.sleep(0.05)            # both threads scan before either has addresses set
        return set()
    monkeypatch.setattr(netns, "_used_subnets", slow_scan)
    # one run id: the same hash start, the worst case
    topos = [netns.NetnsTopology("same-run") for _ in range(4)]
    picked = [None] * 4

    def pick(i):
        picked[i] = topos[i]._pick_subnet()
    threads = [threading.Thread(target=pick, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(set(picked)) == 4
    finally:
        for t in topos:
            t._release_claims()
    assert not netns._CLAIMS.subnets


def test_cells_side_by_side_share_one_batch_budget_and_never_pass_its_cap(tmp_path):
    from lab.errors import BudgetError
    from lab.live.budget import Budget, ConnectionCharger
    budget = Budget(cap_run=100, cap_batch=10, path=tmp_path / "budget.json", day_path=tmp_path / "day.json",
                    cap_day=1000)
    ledgers = {f"run{i}": budget.start_run(f"run{i}") for i in range(4)}
    opened, refused = [], []

    def cell(run_id):
        charger = ConnectionCharger.from_ledger(ledgers[run_id], run_id)    # as each cell's agent does
        for _ in range(5):
            try:
                charger("resume")
                opened.append(run_id)
            except BudgetError:
                refused.append(run_id)
    run_cells([Cell(r, lambda out, r=r: cell(r)) for r in ledgers], jobs=4, out=lambda _l: None, progress=None)
    assert len(opened) == 10 and len(refused) == 10
    import json
    assert json.loads((tmp_path / "budget.json").read_text())["total"] == 10


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_contained_error_stops_only_its_group(jobs):
    class AppDidNotStart(Exception):
        pass
    ran = []

    def cell(group, i):
        def run(out):
            ran.append((group, i))
            if group == "pipecat@1.13.0":
                raise AppDidNotStart("the client command exited at once")
            return i
        return Cell(f"{group} {i}", run, group=group)
    cells = [cell(g, i) for i in range(3) for g in ("livekit@1.8.8", "pipecat@1.13.0")]
    lines = []
    rep = run_cells(cells, jobs=jobs, out=lines.append, progress=None, contain=(AppDidNotStart,))
    assert rep.stopped == {"pipecat@1.13.0": "the client command exited at once"}
    assert [r for r in ran if r[0] == "livekit@1.8.8"] == [("livekit@1.8.8", i) for i in range(3)] or jobs > 1
    assert sorted(i for g, i in ran if g == "livekit@1.8.8") == [0, 1, 2]
    assert len([1 for g, _ in ran if g == "pipecat@1.13.0"]) < 3     # the rest of its group never started
    assert any("the rest of pipecat@1.13.0 is not run" in l for l in lines)
    # an error not contained still stops everything
    with pytest.raises(AppDidNotStart):
        run_cells(cells, jobs=jobs, out=lines.append, progress=None)


def test_run_and_matrix_take_j():
    from lab.cli import build_parser
    p = build_parser()
    assert p.parse_args(["run", "control", "-j", "auto"]).jobs == "auto"
    assert p.parse_args(["matrix", "-j", "3"]).jobs == 3
    assert p.parse_args(["run", "control"]).jobs == 1           # serial unless asked
    with pytest.raises(SystemExit):
        p.parse_args(["matrix", "-j", "0"])


def test_side_by_side_cells_start_longest_first_and_keep_their_order_in_results(tmp_path):
    # a long cell started last would run alone at the end while the other jobs sit idle
    durations = [10.0, 120.0, 30.0, 120.0, 5.0]
    assert parallel.start_order([Cell(f"c{i}", lambda out: None, expected_s=d)
                                 for i, d in enumerate(durations)]) == [1, 3, 2, 0, 4]
    started = []
    lock = threading.Lock()

    def cell(i):
        def run(out):
            with lock:
                started.append(i)
            time.sleep(0.05)        # held, so the two first taken are both started before any ends
            return i
        return run
    cells = [Cell(f"c{i}", cell(i), expected_s=d, log=tmp_path / f"c{i}.log") for i, d in enumerate(durations)]
    rep = run_cells(cells, jobs=2, out=lambda _l: None, progress=None)
    assert rep.results == [0, 1, 2, 3, 4]
    assert set(started[:2]) == {1, 3} and set(started[2:]) == {0, 2, 4}
    serial = []
    run_cells([Cell(f"c{i}", (lambda i: lambda out: serial.append(i))(i), expected_s=d)
               for i, d in enumerate(durations)], jobs=1, out=lambda _l: None, progress=None)
    assert serial == [0, 1, 2, 3, 4]        # a serial batch runs as given


def test_the_matrix_goal_line_names_ratio_goal_and_floor():
    from lab.matrix import goal_line
    rep = parallel.Report(jobs=8, wall_s=100.0, cell_s=[400.0, 300.0])
    assert rep.ratio == pytest.approx(1 / 7)
    assert goal_line(rep) == ("ratio 0.143 against the goal of at most 0.167 (1/6 of serial): met; "
                              "the floor with -j 8 is 0.125 (1/8)")
    slow = parallel.Report(jobs=5, wall_s=150.0, cell_s=[700.0])
    assert "0.214" in goal_line(slow) and ": not met;" in goal_line(slow) and "(1/5)" in goal_line(slow)


class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


def test_the_gate_spaces_starts_by_what_each_costs_over_the_free_cores():
    clock = FakeClock()
    gate = Gate(2.0, clock=clock, sleep=clock.sleep)
    app = Cell("app", lambda out: None, start_cpu_s=parallel.APP_START_CPU_S)
    lab = Cell("lab", lambda out: None, start_cpu_s=parallel.CELL_START_CPU_S)
    starts = []
    for c in (app, app, lab, lab):
        gate.wait(c)
        starts.append(clock.now)
    # the first goes at once; after an app's start (4 s of a core over 2 cores) the next waits 2 s,
    # after a lab cell's (2 s) 1 s
    assert [round(t - 100.0, 3) for t in starts] == [0.0, 2.0, 4.0, 5.0]
    clock.now += 60.0           # a start long after the last one waits for nothing
    before = len(clock.slept)
    gate.wait(app)
    assert len(clock.slept) == before


def test_the_gate_lets_a_stopped_schedule_leave_without_waiting():
    clock = FakeClock()
    gate = Gate(0.5, clock=clock, sleep=clock.sleep)
    app = Cell("app", lambda out: None, start_cpu_s=parallel.APP_START_CPU_S)
    gate.wait(app)
    stop = threading.Event()
    stop.set()
    gate.wait(app, stop)
    assert clock.slept == []        # 8 s owed, none waited: the schedule is stopping


def test_free_cores_never_fall_under_half_the_cores():
    assert free_cores(Machine(cores=2, load1=0.5, available_mib=1)) == 1.5
    assert free_cores(Machine(cores=2, load1=7.0, available_mib=1)) == 1.0


def test_a_cells_share_is_its_start_and_its_run_over_its_time():
    short = Cell("control", lambda out: None, expected_s=20.0)
    long = Cell("b1", lambda out: None, expected_s=120.0, start_cpu_s=parallel.APP_START_CPU_S)
    # (2 s + 0.025 x 20 s) / (20 s + 15 s overhead); (4 + 3) / 135
    assert short.share == pytest.approx(2.5 / 35) and long.share == pytest.approx(7.0 / 135)
    assert Cell("given", lambda out: None, cores=0.7).share == 0.7
    # such cells leave -j auto bound by the cap on a quiet 2-core machine, not by the CPU
    assert auto_jobs(108, Machine(cores=2, load1=0.6, available_mib=16000), share=long.share)[0] == parallel.MAX_AUTO
