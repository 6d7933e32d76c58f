"""The calibration round trip: a twin with a perturbed profile stands in for the live service.

Live-mode runs (the client's namespace reaches the "endpoint" through its uplink, the orchestrator
starts no twin, so the run folder is what a live run writes: no twin.jsonl) go to a twin whose
refusal delay is shifted +150 ms and whose new-session setup is stretched x1.3. Calibration over
those folders must recover both changes within their sampling error, and drift over the same
folders must name both parameters. The scenario gives one refusal a second (calibrate-refusals):
three short runs give dozens of refusals and three new sessions.
"""
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.live.fit import fit
from lab.twin.profile import load_profile
from lab.stats.quantiles import Quantiles
from tests.integration.test_live_path import live_env  # noqa: F401  (the fixture: a twin on the uplink)

pytestmark = pytest.mark.netns

SCENARIO = str(Path(__file__).resolve().parents[1] / "fixtures" / "calibrate-refusals.yaml")
RUNS = 3
SEED = 1
SHIFT_S = 0.150
STRETCH = 1.3


def _table(q: Quantiles, f) -> dict:
    return {k: round(f(v), 4) for k, v in q.as_mapping().items()}


def _twin_draws_ms(twin: list[dict]) -> dict[str, list[float]]:
    """What the twin drew for the two unperturbed intervals, from its log: a new session's
    setupComplete -> its first sessionResumptionUpdate, and a typed line heard -> its toolCall. The
    draw, not the interval its own clock saw: on a loaded machine its timers fire tens of ms late,
    and that lateness, like the path, is this run's and not the profile's."""
    heard, out = set(), {"handle_update_delay_s": [], "tool_call_delay_s": []}
    for e in twin:
        key = (e.get("session"), e.get("conn"))
        if e["kind"] == "twin.accept" and not e["resume"] and e.get("handle_drawn_ms") is not None:
            out["handle_update_delay_s"].append(e["handle_drawn_ms"])
        elif e["kind"] == "twin.user" and e.get("source") != "speech":
            heard.add(key)
        elif e["kind"] == "twin.tool_call" and key in heard:
            heard.discard(key)
            out["tool_call_delay_s"].append(e["drawn_ms"])
    return out


def _own_path_off(samples, name: str, median_path_ms: float, runs: list[Path], twin_logs: list[list[dict]]) -> list[float]:
    """The client's figures with this run's path taken off, for the KS judgement against the
    perturbed profile. Where a run makes one new connection, each figure's own path is known: the
    batch runs one run at a time and the hook serves twin k for the k-th run, so run k's figure pairs
    with twin k's draw, and what is left once its path is off is the draw it measured: the judgement
    is then whether the connections the client timed drew from the perturbed profile. One median
    path taken off every figure of n = 3 let one connection's loaded path (tens of ms over the
    others) alone cross the KS critical value. Where a run draws many
    (a refusal a second), the pairing inside a run is not known and the median of n = 54 is steady."""
    if name != "new_setup_s":
        return [s.value - median_path_ms / 1000 for s in samples]
    draws = {r.name: [e["drawn_ms"] for e in log if e["kind"] == "twin.accept" and not e["resume"]]
             for r, log in zip(runs, twin_logs)}
    out = []
    for s in samples:
        (drawn_ms,) = draws[s.run]                       # one new connection a run
        path_ms = s.value * 1000 - drawn_ms
        # the client saw its own twin's draw, late only by a path: not early, not a second late
        assert -1 <= path_ms < 500, (s, drawn_ms)
        out.append(s.value - path_ms / 1000)
    return out


def _median_range_ms(value: Quantiles, n: int, level: float = 0.01) -> tuple[float, float]:
    """Where the median of n draws from a profile's distribution lies, but for `level` of samples.
    Exact for the sample median, whatever n: it is at or below F^-1(p) just when at least half the
    draws are (a binomial tail in p), so the range is F^-1 at the two p whose tails are level / 2.
    A bootstrap error of the sample itself says nothing at n = 3 (three close values give a near
    zero error whichever profile they came from)."""
    need = n // 2 + 1 if n % 2 else n // 2           # draws at or below for the median to be

    def below(p: float) -> float:                      # P(median <= F^-1(p))
        return sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(need, n + 1))

    def solve(target: float) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if below(mid) < target else (lo, mid)
        return (lo + hi) / 2
    return value.at(solve(level / 2)) * 1000, value.at(solve(1 - level / 2)) * 1000


@pytest.fixture(scope="module")
def base():
    return load_profile("developer-api")


@pytest.fixture
def perturbed(base):
    return {"refuse_close_s": _table(base["refuse_close_s"], lambda v: v + SHIFT_S),
            "new_setup_s": _table(base["new_setup_s"], lambda v: v * STRETCH)}


def test_calibration_recovers_a_perturbed_twin_and_drift_names_it(tmp_path, live_env, perturbed, base):  # noqa: F811
    from lab.live.calibrate import calibrate_dirs
    from lab.run import run_batch

    # the twins' draws are seeded: each judgement below is at the 1 % level, and four of them drawn
    # afresh would fail one run in twenty-five by design; what still moves from run to run is the
    # machine's (the path, the loops, the timers), which the checks take off
    hook = live_env(overrides=perturbed, seed=SEED)
    lines = []
    batch = run_batch([SCENARIO], n=RUNS, endpoint="live", endpoint_hook=hook, out_dir=tmp_path / "batch",
                      out=lines.append)
    runs = sorted(d for d in batch.iterdir() if d.is_dir())
    assert len(runs) == RUNS
    for r in runs:      # what a live run writes: the client's record and the server's frames, no twin's
        assert not (r / "twin.jsonl").exists() and (r / "frames.jsonl").is_file(), lines[-10:]
        assert json.loads((r / "run.json").read_text())["endpoint"] == "live"

    out, cals, report = calibrate_dirs([batch], out=tmp_path / "overlay.yaml", min_records=RUNS)
    by = {c.parameter: c for c in cals}
    print("\n".join(report))
    want = load_profile("developer-api", perturbed)
    # the in-run baseline: what the twin itself drew for these connections (its logs are the test's,
    # beside the runs: a live run folder has none). A client's figure is that draw plus the path and
    # both event loops, which on a shared machine can be tens of ms: that part is measured here, per
    # parameter, and taken off before the figures are compared with the profile
    twin_logs = [[json.loads(ln) for ln in (tmp_path / f"twin-{k}.jsonl").open()] for k in range(len(runs))]
    twin = [e for log in twin_logs for e in log]
    drawn = {"refuse_close_s": [e["close_in_ms"] for e in twin if e["kind"] == "twin.refuse"],
             "new_setup_s": [e["drawn_ms"] for e in twin if e["kind"] == "twin.accept" and not e["resume"]]}
    paths = {}
    for name, moved_by in (("refuse_close_s", SHIFT_S * 1000), ("new_setup_s", None)):
        c = by[name]
        assert c.n >= RUNS, (name, c.n, report)
        assert {s.base for s in c.samples} == {"setup sent"}     # the twin's clock: from the setup frame
        # each figure the client measured is one the twin drew: as many, none seen before it was due
        assert len(drawn[name]) >= c.n, (name, len(drawn[name]), c.n)
        path_ms = statistics.median(s.value * 1000 for s in c.samples) - statistics.median(drawn[name])
        print(f"{name}: the client's figure minus the twin's draw, median of {c.n}: {path_ms:.1f} ms")
        assert path_ms >= -1, (name, path_ms, report)
        paths[name] = path_ms
        f = c.fit
        i = f.probabilities.index(0.5)
        got_ms, err_ms = f.fitted[i] * 1000 - path_ms, f.stderr[i] * 1000
        lo_ms, hi_ms = _median_range_ms(want[name], c.n)
        print(f"{name}: fitted median, path off, {got_ms:.1f} ms; a median of {c.n} draws from the perturbed "
              f"profile lies in {lo_ms:.1f}-{hi_ms:.1f} ms but for 1 %")
        # the perturbation is recovered within the sampling error: the fitted median, this run's path
        # taken off, lies where the median of as many draws from the perturbed profile lies 99 times in
        # 100 (plus 5 ms of quantile interpolation); the sample is rejected by the profile it came from
        # and, path taken off, consistent with the perturbed one (KS below its 1 % critical value)
        assert lo_ms - 5 <= got_ms <= hi_ms + 5, (name, got_ms, lo_ms, hi_ms, report)
        assert f.changed, (name, f.ks, f.ks_crit, report)
        again = fit(_own_path_off(c.samples, name, path_ms, runs, twin_logs), want[name])
        print(f"{name}: path off, against the perturbed profile: D {again.ks:.3f} (1 % critical {again.ks_crit:.3f})")
        assert not again.changed, (name, again.ks, again.ks_crit, report)
        if moved_by is not None:
            assert abs((got_ms - base[name].at(0.5) * 1000) - moved_by) <= 3 * err_ms + 5
    # what was not perturbed is not flagged (a 1 % chance each that it is, at any n), once this run's
    # own share is off: the client stamps both ends of these intervals itself, so on a loaded machine
    # its loop, late to stamp the first frame, shortens or stretches them by tens of ms, and the
    # twin's timers fire late by as much; the twin's draws for the same intervals say by how much
    draws = _twin_draws_ms(twin)
    for name in ("handle_update_delay_s", "tool_call_delay_s"):
        c = by[name]
        assert c.n >= RUNS, (name, c.n, report)
        own = draws[name]
        assert len(own) >= c.n, (name, own, c.n)
        off_ms = statistics.median(s.value * 1000 for s in c.samples) - statistics.median(own)
        print(f"{name}: the client's figure minus the twin's draw, median of {c.n}: {off_ms:.1f} ms")
        judged = fit([s.value - off_ms / 1000 for s in c.samples], base[name])
        print(f"{name}: this run's share off, against the profile: D {judged.ks:.3f} (1 % critical {judged.ks_crit:.3f})")
        assert not judged.changed, (name, off_ms, report)
    # the overlay is a profile; its refusal delay is the perturbed one within the error (the path in)
    doc = yaml.safe_load(out.read_text())
    assert doc["params"]["refuse_close_s"]["distance"]["changed"] is True
    fitted = load_profile(str(out))
    assert fitted["refuse_close_s"].at(0.5) - paths["refuse_close_s"] / 1000 == \
        pytest.approx(want["refuse_close_s"].at(0.5), abs=0.03)

    # drift over the same folders names each perturbed parameter, and says which clock it measured on
    drift = subprocess.run([sys.executable, "-m", "lab", "drift", str(batch)], capture_output=True, text=True)
    assert drift.returncode == 1, drift.stdout + drift.stderr
    md = (batch / "drift.md").read_text()
    changed = [ln for ln in md.splitlines() if "**changed**" in ln]
    for name in perturbed:
        assert any(f"| {name} |" in ln and "KS" in ln for ln in changed), md
    # a twin does nothing a twin never does: no frame kind, close code or reason outside the profile
    assert not [ln for ln in changed if "(not modelled)" in ln], md
