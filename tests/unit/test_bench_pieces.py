"""The arithmetic of `lab bench twin` and `lab bench overhead`, on made-up inputs (no servers, no runs)."""
import base64
import json
import math
import re
import time

import pytest

from lab.bench import load, overhead, twin
from lab.errors import LabError
from lab.events import EventLog
from lab.report.phases import PHASES_FILE
from lab.report import phases
from lab.run import _Phases


def _audio_frame(n_bytes: int) -> dict:
    data = base64.b64encode(bytes(n_bytes)).decode()
    return {"serverContent": {"modelTurn": {"parts": [{"inlineData": {"mimeType": "audio/pcm;rate=24000",
                                                                      "data": data}}]}}}


@pytest.mark.parametrize("n_bytes", [14880, 14881, 14882, 2, 0])
def test_audio_seconds_are_read_from_the_base64_length(n_bytes):
    assert load._audio_s(_audio_frame(n_bytes)) == pytest.approx(n_bytes / 2 / 24000)


def test_a_resumption_update_is_not_a_reply():
    assert not load._is_reply({"sessionResumptionUpdate": {"newHandle": "h"}})
    assert load._is_reply({"serverContent": {"turnComplete": True}})
    assert load._is_reply({"toolCall": {"functionCalls": []}})


def test_run_phases_are_written_in_order(tmp_path):
    ph = _Phases()
    for name in ("topology_up", "services_ready", "agent"):
        ph.mark(name)
    ph.write(tmp_path / PHASES_FILE)
    got = json.loads((tmp_path / PHASES_FILE).read_text())
    assert list(got) == ["topology_up", "services_ready", "agent"]
    assert all(v >= 0 for v in got.values())


def _fake_run(tmp_path, phases: dict, start_ms: float | None, end_ms: float | None):
    (tmp_path / PHASES_FILE).write_text(json.dumps(phases))
    log = EventLog(tmp_path / "events.jsonl", t0=1000.0)
    for kind, ms in (("run.start", start_ms), ("run.end", end_ms)):
        if ms is not None:
            log._fh.write(json.dumps({"t": 1000 + ms / 1000, "ms": ms, "src": "agent", "kind": kind}) + "\n")
    log.close()
    return tmp_path


def test_overhead_is_every_phase_but_the_scenario(tmp_path):
    run = _fake_run(tmp_path, {"topology_up": 0.5, "services_ready": 0.7, "agent": 12.0, "teardown": 0.4,
                               "report": 1.1}, start_ms=1900.0, end_ms=11900.0)
    fig = phases.figures(run)
    assert fig["agent_start"] == pytest.approx(1.2)      # run.start 1.9 s after t0, services took 0.7
    assert fig["scenario"] == pytest.approx(10.0)
    assert fig["agent_exit"] == pytest.approx(0.8)       # 12.0 - 1.2 - 10.0
    assert fig["overhead"] == pytest.approx(0.5 + 0.7 + 1.2 + 0.8 + 0.4 + 1.1)


def test_a_matrix_sums_each_phase_over_the_cells_that_got_through(tmp_path):
    for d in "ab":
        (tmp_path / d).mkdir()
    a = _fake_run(tmp_path / "a", {"topology_up": 0.5, "services_ready": 0.7, "agent": 12.0, "teardown": 0.4,
                                   "report": 1.1}, start_ms=1900.0, end_ms=11900.0)
    b = _fake_run(tmp_path / "b", {"topology_up": 1.5, "services_ready": 0.3, "agent": 5.0, "teardown": 0.6,
                                   "report": 0.9}, start_ms=1300.0, end_ms=5300.0)
    broken = tmp_path / "c"
    broken.mkdir()
    total, read = phases.summed([a, b, broken])
    assert read == 2
    assert total["topology_up"] == pytest.approx(2.0) and total["scenario"] == pytest.approx(14.0)
    assert total["agent_start"] == pytest.approx(1.2 + 1.0)
    said = phases.line(total)
    assert said.startswith("topology up 2.0 s (") and "the scenario 14.0 s (" in said
    shares = [int(x) for x in re.findall(r"\((\d+) %\)", said)]
    assert len(shares) == 7 and sum(shares) in range(98, 103)


def test_a_run_the_agent_never_ended_is_refused(tmp_path):
    run = _fake_run(tmp_path, {"topology_up": 0.5, "services_ready": 0.7, "agent": 3.0, "teardown": 0.4,
                               "report": 1.1}, start_ms=1900.0, end_ms=None)
    with pytest.raises(LabError, match="did not start and end"):
        phases.figures(run)


@pytest.mark.parametrize("argv, words", [(["--mode", "stream,bogus"], "bad --mode"),
                                         (["--sessions", "1,x"], "bad --sessions"),
                                         (["--sessions", "0"], "bad --sessions"),
                                         (["--duration", "0"], "bad --duration"),
                                         (["--rounds", "0"], "bad --rounds"),
                                         (["--slices", "0"], "bad --slices"),
                                         (["--duration", "2", "--slices", "5"], "slices of at least 0.5 s")])
def test_bad_twin_bench_flags_are_one_clear_error_before_anything_starts(argv, words):
    with pytest.raises(LabError, match=words):
        twin.main(argv)


def test_twin_bench_levels_default_per_mode():
    class A:
        mode, sessions = "stream,idle", None
    assert twin._levels(A) == [("stream", 1), ("stream", 50), ("stream", 200), ("idle", 1000)]


def _row(server: str, cpu_s: float, p99_ms: float, frames: int = 1000) -> twin.Row:
    tally = load.Tally(opened=200, held=200, lats_ms=[1.0] * 98 + [p99_ms] * 2, mic_chunks=frames - 100)
    return twin.Row(server, "stream", 200, tally, 100.0, 0.5, 0.2, cpu_s)


def test_with_several_rounds_the_goal_is_the_median_of_each_rounds_own_ratio(capsys):
    # each round's twin is set against the baseline run just before it, not against another round's
    rows = [_row("baseline", 1.0, 10.0), _row("twin", 1.1, 11.0),
            _row("baseline", 2.0, 40.0), _row("twin", 4.0, 40.0),     # a loaded round: 2.0x, 1.0x
            _row("baseline", 1.0, 10.0), _row("twin", 1.2, 30.0)]
    twin._floors(rows)
    out = capsys.readouterr().out
    assert "cpu per client frame 1.20x the baseline" in out and "(<= 1.15x: NOT met)" in out
    assert "p99 1.10x (<= 1.2x: met)" in out and "median of 3 rounds: cpu 1.10, 2.00, 1.20" in out


def test_the_floor_beside_the_figure_is_the_shells_ratio_and_a_tight_loop_cores(capsys):
    # the shell row (the twin's own server answering as the baseline does) is what no change to
    # the core can move; with the core's hot costs, what a core as fast in the server would read
    from lab.bench.twin_core import Kinds

    rows = [_row("baseline", 1.0, 10.0), _row("twin", 1.6, 16.0), _row("shell", 1.1, 12.0)]
    hot = Kinds(mic_us=15.0, question_us=50.0, base_mic_us=10.0, base_question_us=0.0)
    # 900 chunks 5 us over, 100 questions 50 us over: 9.5 us a frame beyond the shell's 1100 us
    assert hot.extra_us(900, 100) == pytest.approx(9.5)
    line = twin._floor_line(rows, "stream", 200, hot)
    assert "the baseline does 1.10x the baseline, the twin 1.45x that" in line
    assert "5.0 us a microphone chunk and 50.0 us a question" in line and "it would read 1.11x" in line
    assert twin._floor_line(rows[:2], "stream", 200, hot) == ""      # no shell row, no floor
    twin._floors(rows)
    out = capsys.readouterr().out
    assert "cpu per client frame 1.60x" in out and "1.10x the baseline, the twin 1.45x that" in out
    assert "tight loop" not in out      # without the core's hot figures only the shell's part


def test_twin_over_shell_is_printed_beside_its_own_goal(capsys):
    # the core's part, twin/shell in the same slices: cpu and p99 each against 1.15x, met or not
    rows = [_row("baseline", 1.0, 10.0), _row("twin", 1.32, 12.0), _row("shell", 1.1, 11.0),
            _row("baseline", 1.0, 10.0), _row("twin", 1.21, 13.0), _row("shell", 1.1, 10.0),
            _row("baseline", 1.0, 10.0), _row("twin", 1.21, 20.0), _row("shell", 1.1, 10.0)]
    line = twin._floor_line(rows, "stream", 200, None)
    # medians of the rounds: cpu 1.10x (1.20, 1.10, 1.10), p99 1.30x (1.09, 1.30, 2.00)
    assert "twin/shell, the core's part: cpu 1.10x, goal <= 1.15x: met; p99 1.30x, goal <= 1.15x: NOT met" in line
    assert twin._core_goals(1.2, 1.0) == "cpu 1.20x, goal <= 1.15x: NOT met; p99 1.00x, goal <= 1.15x: met"
    assert "NOT met" in twin._core_goals(math.nan, math.nan).split("p99")[0]    # no figure is not a met goal


def test_the_twin_core_times_each_kind_of_frame_and_the_timers_of_the_turns():
    from lab.bench import twin_core
    from lab.bench.load import MIC_CHUNK, QUESTION

    todo = twin_core.steady(4, 400)
    after = [d for at, _c, d in todo if at >= twin_core.SCALE_WARM_S]
    got: dict = {}
    twin_core.drive(4, todo, warm_s=twin_core.SCALE_WARM_S, kinds=got)
    assert got[MIC_CHUNK][0] == after.count(MIC_CHUNK) and got[QUESTION][0] == after.count(QUESTION)
    # a question's turn fires two timers here (generationComplete, turnComplete), give or take
    # the turns still under way at either end
    assert abs(got["timers"][0] - 2 * after.count(QUESTION)) <= 2 * 4
    assert all(ns > 0 for _n, ns in got.values())


def test_the_twin_core_bench_sends_the_stream_mix_and_the_core_answers():
    from lab.bench import twin_core
    from lab.bench.load import MIC_CHUNK, QUESTION

    todo = twin_core.frames(2, 3.0)
    assert [at for at, _c, _d in todo] == sorted(at for at, _c, _d in todo)
    mic = [c for _at, c, d in todo if d == MIC_CHUNK]
    asked = [c for _at, c, d in todo if d == QUESTION]
    # a chunk every 100 ms from ~0.5 s, a question every 0.6-1.1 s, per session
    assert [mic.count(c) for c in (1, 2)] == [25, 25] and 4 <= len(asked) <= 8
    _cpu, written = twin_core.drive(2, todo)
    # each question is a user turn and a model decision in the twin's record, at least
    assert written >= 2 * len(asked)


def test_the_twin_core_scale_keeps_the_frames_per_session_and_times_only_the_steady_state(capsys):
    from lab.bench import twin_core

    # the same frames per session-second at every count, so a cell differs only in how many
    # sessions take turns; about n of them after the warm-up
    for sessions in (5, 50):
        todo = twin_core.steady(sessions, 2000)
        after = [f for f in todo if f[0] >= twin_core.SCALE_WARM_S]
        assert 1800 <= len(after) <= 2200 and len({c for _, c, _ in after}) == sessions
    # the warm-up's setups and first turns are not in the figure: its events are the timed part's
    todo = twin_core.steady(5, 500)
    _, all_events = twin_core.drive(5, todo)
    _, timed_events = twin_core.drive(5, todo, warm_s=twin_core.SCALE_WARM_S, evict=bytearray(2048))
    assert 0 < timed_events < all_events
    assert twin_core.scale([2, 4], [0, 1], 200, 1) == 0
    out = capsys.readouterr().out.splitlines()
    assert "2 sessions" in out[1] and "4 sessions" in out[1]
    assert [ln.split()[:2] for ln in out[2:]] == [["0", "KiB"], ["1", "KiB"]]
    assert "(1.00x)" in out[2].split("KiB", 1)[1].split()[1]


@pytest.mark.parametrize("flag", ["--scale=0,5", "--scale=a", "--evict=-1"])
def test_bad_twin_core_scale_flags_are_one_clear_error(flag, capsys):
    from lab.bench import twin_core

    with pytest.raises(SystemExit) as e:
        twin_core.main([flag, "--scale=1" if flag.startswith("--evict") else "--frames=10"])
    assert e.value.code == 2 and capsys.readouterr().err.count("error:") == 1


def test_an_alternating_rounds_line_says_how_far_its_slices_moved(capsys):
    # the figure is the sum of the slices; the spread of the slice-by-slice ratios says how far to trust it
    b, t = _row("baseline", 1.0, 10.0), _row("twin", 1.1, 11.0)
    b.slice_us, t.slice_us = [100.0, 200.0, 100.0], [110.0, 200.0, 130.0]
    assert twin._slice_ratios(b, t) == "slice by slice 1.00-1.30x, median 1.10x"
    b.slice_us, t.slice_us = [100.0], [110.0]
    assert twin._slice_ratios(b, t) == ""      # one slice: the level's own ratio says it
    b.slice_us, t.slice_us = [100.0, 200.0], [110.0, 220.0]
    twin._floors([b, t])
    assert "(11.0 vs 10.0 ms; cpu slice by slice 1.10-1.10x, median 1.10x)" in capsys.readouterr().out


def test_a_rows_page_faults_print_per_client_frame():
    # a server whose CPU goes to its allocator shows it here (the baseline once paid 1-3 a frame)
    r = _row("baseline", 1.0, 10.0, frames=1000)
    r.server_faults = 500
    assert r.faults_per_frame == 0.5
    assert twin._line(r).endswith(" 0.50") and twin.HEADER.endswith("faults/frame")


def test_a_timed_servers_totals_are_read_back_and_printed_costliest_first():
    from lab.bench import timed_server
    from lab.bench.timed_server import Span

    out = "twin: stopped\ntimed " + '{"a microphone chunk": [2000, 0.12], "arm a timer": [300, 0.003]}\n'
    totals = timed_server.parse(out)
    assert totals == {timed_server.MIC: (2000, 0.12), timed_server.SCHEDULE: (300, 0.003)}
    assert timed_server.parse("twin: stopped\n") == {}     # a server that did not exit cleanly
    got = timed_server.lines(Span(totals, span_s=10.0, cpu_s=0.5, frames=2000))
    assert got[1].split() == ["a", "microphone", "chunk", "200", "60.0", "24%"]
    assert got[2].split()[-3:] == ["30", "10.0", "1%"] and got[-1].split()[-1] == "75%"
    # a frame is named before it is parsed, text or binary
    assert timed_server.frame_name('{"realtime_input":{"audio":{"data":"AAAA') == timed_server.MIC
    assert timed_server.frame_name(b'{"realtimeInput":{"audio":{') == timed_server.MIC
    assert timed_server.frame_name('{"realtime_input":{"text":"Did you book it?"}}') == timed_server.OTHER_FRAME


def test_beside_the_baseline_each_line_says_what_it_costs_the_twin_per_client_frame():
    from lab.bench import timed_server
    from lab.bench.timed_server import Span

    twin = Span({timed_server.MIC: (1000, 0.030), timed_server.TIMER.format("Step"): (100, 0.002)},
                span_s=1.0, cpu_s=0.100, frames=1000)
    base = Span({timed_server.MIC: (2000, 0.030), timed_server.BASELINE_TIMER: (50, 0.001)},
                span_s=2.0, cpu_s=0.120, frames=2000)
    got = {" ".join(line.split()[:3]): line.split() for line in timed_server.lines(twin, base)}
    # 30 us a frame against 15: 15 more per client frame
    assert got["a microphone chunk"][-2:] == ["15.0", "15.0"]
    # a call only one server makes is all extra (or all saved), its missing side printed "-"
    assert got["a timer (Step)"][-2:] == ["-", "2.0"]
    assert got["a timer (a"][5:8] == ["-", "-", "-"] and got["a timer (a"][-1] == "-0.5"
    # what the calls leave (68 us a frame against 44.5) and the whole: 100 against 60 us a frame
    assert got["the rest (websockets"][-1] == "23.5"
    assert got["all (us per"][-3:] == ["100.0", "60.0", "40.0"]


def test_a_timed_call_inside_another_counts_on_its_own_line_only(monkeypatch):
    from lab.bench import timed_server

    clock = iter([0.0, 1.0, 3.0, 10.0]).__next__     # outer in, inner in, inner out, outer out
    monkeypatch.setattr(timed_server, "CLOCK", clock)
    monkeypatch.setattr(timed_server, "_totals", {})
    inner = timed_server._timed(lambda: None, lambda: "write a frame")
    outer = timed_server._timed(lambda: inner(), lambda: "a timer (a frame due)")
    outer()
    assert timed_server._totals == {"write a frame": [1, 2.0], "a timer (a frame due)": [1, 8.0]}


def test_a_timed_call_is_the_threads_cpu_less_one_read_of_its_clock(monkeypatch):
    # CPU time, not wall: a loaded machine's wait for a CPU is not a call's cost; and what one read
    # of that clock (a system call) adds to each interval is taken out
    from lab.bench import timed_server

    assert timed_server.CLOCK is time.thread_time
    reads = iter([0.0, 0.25, 1.0, 1.25, 1.5, 1.75]).__next__
    assert timed_server.clock_read_s(reads, n=3) == 0.25
    clock = iter([0.0, 2.0]).__next__
    monkeypatch.setattr(timed_server, "CLOCK", clock)
    monkeypatch.setattr(timed_server, "_totals", {})
    timed_server._timed(lambda: None, lambda: "a microphone chunk", read_s=0.25)()
    assert timed_server._totals == {"a microphone chunk": [1, 1.75]}


def test_recovery_goal_lines_say_met_or_not_beside_the_floor():
    from lab.bench.recovery import goal_lines
    met = goal_lines(1200.0, 1103.0)
    assert "goal <= 1500 ms met" in met[0] and "1.09x it" in met[1] and "floor (1268 ms) met" in met[1]
    missed = goal_lines(1381.0, 1103.0)
    assert "1.25x it" in missed[1] and "NOT met" in missed[1] and "NOT met" not in missed[0]


def test_false_alarm_goal_line_needs_ten_minutes_and_no_detection():
    from lab.bench.false_alarms import goal_line
    assert goal_line(0, 10.0).endswith(" met")
    assert "NOT met" in goal_line(1, 10.0) and "NOT met" in goal_line(1, 2.0)
    assert "not judged" in goal_line(0, 2.0)
