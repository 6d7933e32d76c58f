"""`lab twin calibrate DIR...`: the twin's timed parameters fitted from live run folders.

Each timed parameter (lab.live.samples.MEASURES: what one sample is, from which record, on which
clock) gets its records' count, the quantiles fitted at the profile table's own probabilities, and
the distance from the profile's current value (lab.live.fit: the one-sample KS statistic D and its
1 % critical value at that n; the largest quantile difference and each fitted quantile's bootstrap
standard error beside it).

The overlay it writes is a twin profile that `extends:` the profile it was compared with and sets
only the parameters fitted from at least `min_records` samples, each with its `source:` (the count,
the folders, the clock) and, for the reader, `records` and `distance` (and `fitted`, the table, where
the parameter is one number and takes the median); load_profile reads `value` and `source` and
ignores the rest. So it is used as any profile is:
`lab twin serve --profile overlay.yaml`, `lab drift DIR --profile overlay.yaml`, or a scenario's
`twin: {profile: path/to/overlay.yaml}`. A parameter with fewer records keeps the base's value and
is listed under `not_fitted`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from lab.live.fit import LEVEL, Fit, fit
from lab.live.samples import MEASURES, Measure, Record, Sample, read_record
from lab.report.summary import runs_under
from lab.twin.params import DECLARED, Number
from lab.twin.profile import Profile, load_profile
from lab.stats.quantiles import Quantiles

MIN_RECORDS = 5
# the twin's and the client's timers land a few ms late on a loaded machine (docs/calibration.md has
# the figure): allowed beside the sampling error where a parameter is one number
TIMER_LAG_MS = 10.0


@dataclass
class Calibration:
    measure: Measure
    samples: list[Sample]
    current: Any                 # the profile's value, in the parameter's unit
    fit: Fit | None              # None: no sample

    @property
    def parameter(self) -> str:
        return self.measure.parameter

    @property
    def n(self) -> int:
        return len(self.samples)

    def bases(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.samples:
            if s.base:
                out[s.base] = out.get(s.base, 0) + 1
        return out


def records_under(dirs: Iterable[Path | str]) -> list[Record]:
    """Every run folder at or under the given folders, read as a live run's (LabError: none there)."""
    return [read_record(r) for d in dirs for r in runs_under(d)]


def calibrate(records: list[Record], prof: Profile) -> list[Calibration]:
    out = []
    for m in MEASURES:
        # null is the one nullable timed parameter's "with setupComplete" (handle_update_delay_s): 0 s
        current = 0.0 if prof[m.parameter] is None else prof[m.parameter]
        samples = m.samples(records)
        lag = TIMER_LAG_MS / 1000.0 if m.unit == "s" else TIMER_LAG_MS
        f = fit([s.value for s in samples], current, seed=len(samples), resolution=lag) if samples else None
        out.append(Calibration(m, samples, current, f))
    return out


def _ms(c: Calibration, v: float) -> float:
    return v * 1000.0 if c.measure.unit == "s" else v


def _round(c: Calibration, v: float) -> float:
    return round(v, 4) if c.measure.unit == "s" else round(v, 1)


def fitted_value(c: Calibration) -> Any:
    """The value the overlay sets: the fitted table, or for a one-number parameter the median."""
    assert c.fit is not None
    if isinstance(DECLARED[c.parameter], Number):
        return _round(c, c.fit.table().at(0.5))
    return {k: _round(c, v) for k, v in c.fit.table().as_mapping().items()}


def _keys(f: Fit) -> list[str]:
    return list(f.table().as_mapping())


def distance_of(c: Calibration) -> dict[str, Any]:
    f = c.fit
    assert f is not None
    point = {"median_gap_ms": round(_ms(c, f.median_gap), 1), "median_allowed_ms": round(_ms(c, f.median_allowed), 1),
             "compared": "median (the profile's value is one number)"} if f.point else {}
    return {"ks": round(f.ks, 3), "ks_crit": round(f.ks_crit, 3), "level": LEVEL, **point, "changed": f.changed,
            "max_quantile_diff_ms": round(_ms(c, f.max_quantile_diff), 1),
            "quantile_stderr_ms": {k: round(_ms(c, e), 1) for k, e in zip(_keys(f), f.stderr)}}


def overlay(cals: list[Calibration], prof: Profile, base: str, dirs: list[str],
            min_records: int = MIN_RECORDS) -> dict[str, Any]:
    params: dict[str, Any] = {}
    not_fitted: dict[str, str] = {}
    where = ", ".join(dirs)
    for c in cals:
        if c.fit is None or c.n < min_records:
            not_fitted[c.parameter] = f"{c.n} record(s), fewer than {min_records}: kept {c.current!r}"
            continue
        bases = ", ".join(f"{k} {v}" for k, v in c.bases().items())
        params[c.parameter] = {
            "value": fitted_value(c),
            "source": (f"calibrated (lab twin calibrate) from {c.n} live records under {where}: {c.measure.what}, "
                       f"{c.measure.clock}{f' (base: {bases})' if bases else ''}; was {c.current!r}"),
            "records": c.n,
            "distance": distance_of(c),
        }
        if isinstance(DECLARED[c.parameter], Number):     # the value is the median: the table beside it
            params[c.parameter]["fitted"] = {k: _round(c, v) for k, v in zip(_keys(c.fit), c.fit.fitted)}
    for name, prm in prof.params.items():
        if prm.overridden and name not in params:     # the base as compared, --set values included
            params[name] = {"value": prm.value.as_mapping() if isinstance(prm.value, Quantiles) else prm.value,
                            "source": prm.source}
    return {"name": f"{prof.name}-calibrated", "extends": base,
            "description": f"{prof.name} with its timed parameters fitted from live runs under {where}",
            "params": params, "not_fitted": not_fitted}


def render(cals: list[Calibration], profile_name: str, runs: int) -> list[str]:
    lines = [f"{runs} run folders against `{profile_name}`; distance: one-sample KS D against the profile's "
             f"distribution, changed when D > its {LEVEL:.0%} critical value at n",
             f"{'parameter':<30} {'n':>4} {'p50 fit':>9} {'p50 prof':>9} {'KS D':>6} {'crit':>6}  status"]
    for c in cals:
        if c.fit is None:
            lines.append(f"{c.parameter:<30} {0:>4} {'-':>9} {'-':>9} {'-':>6} {'-':>6}  not observed")
            continue
        f = c.fit
        i = min(range(len(f.probabilities)), key=lambda k: abs(f.probabilities[k] - 0.5))
        lines.append(f"{c.parameter:<30} {c.n:>4} {_ms(c, f.fitted[i]):>7.0f}ms {_ms(c, f.profile[i]):>7.0f}ms "
                     f"{f.ks:>6.2f} {f.ks_crit:>6.2f}  {'CHANGED' if f.changed else 'consistent'}")
    return lines


def calibrate_dirs(dirs: list[Path | str], profile: str = "developer-api", overrides: Iterable[str] | None = None,
                   out: Path | None = None, min_records: int = MIN_RECORDS) -> tuple[Path, list[Calibration], list[str]]:
    """Fit every timed parameter from the runs under `dirs`; write the overlay (default: the first
    folder's twin-calibrated.yaml)."""
    records = records_under(dirs)
    prof = load_profile(profile, list(overrides or []))
    cals = calibrate(records, prof)
    names = [str(d) for d in dirs]
    # a profile given as a file is extended by its absolute path: the overlay may be read from elsewhere
    base = str(Path(profile).resolve()) if Path(profile).suffix in (".yaml", ".yml") else profile
    doc = overlay(cals, prof, base, names, min_records)
    out = Path(out) if out else Path(dirs[0]) / "twin-calibrated.yaml"
    out.write_text("# lab twin calibrate: load it as a twin profile (lab twin serve --profile FILE)\n"
                   + yaml.safe_dump(doc, sort_keys=False, width=120))
    lines = render(cals, prof.name, len(records))
    twins = sum(1 for r in records if r.endpoint == "twin")
    if twins:
        lines.append(f"note: {twins} of the {len(records)} runs ran against the twin (run.json endpoint: twin): "
                     "their figures are the twin's own draws, not the service's")
    return out, cals, lines
