"""Drift: does the real endpoint still behave the way the twin's profile says it does?

The twin's profile (`lab/twin/profiles/<name>.yaml`) names every behaviour with a value and the
measurement it comes from. A live run (or a soak) observes the same behaviours; `compare()` puts
the two side by side and calls each behaviour unchanged, changed or not observed:

| behaviour | profile parameter(s) | observed in |
| --- | --- | --- |
| lockout after a silent loss | (000 finding 3; `resume_while_attached` / `lockout*` if present) | resumes after a blackhole/freeze, before any close |
| refusal code | `refuse_code` | codes of refused resumes |
| refusal delay | `refuse_close_s` (or `*_ms`) [lo, hi] | each refusal's latency |
| resume after the close | `resume_setup_s` [lo, hi] | close of the old connection -> resumed setupComplete |
| new session setup | `new_setup_s` [lo, hi] | the fallback's new session setup |
| goAway | `goaway_after_s` (null = never) | `conn.go_away` events |
| transparent mode | `transparent_supported`, `transparent_reject_code` | runs that asked for transparent |
| pending call after resume | `pending_call_answerable` (default true, 000 finding 1) | the pre-loss call answered after a resume |
| handle updates per connection | `handle_updates` (`once`) | handle.update count per connection |

Ranges are checked with a tolerance (default 25 % of each bound) because the profile's ranges
come from 3 to 12 runs. The reader is tolerant of the YAML's layout: parameters may sit under
`params:` or at the top level, as `{value, source}` or as bare values; names ending in `_s` are
seconds and are compared in ms.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lab.errors import LabError
from lab.report.summary import fmt_range

UNCHANGED, CHANGED, NOT_OBSERVED = "unchanged", "changed", "not observed"
SILENT_LOSS_KINDS = ("blackhole", "black_hole", "freeze", "partition")


@dataclass
class Behaviour:
    name: str
    expected: str
    observed: str
    status: str
    source: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)


def profile_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    here = Path(__file__).resolve().parents[1] / "twin" / "profiles" / f"{name_or_path}.yaml"
    if here.is_file():
        return here
    raise LabError(f"no twin profile {name_or_path!r} (looked for {here})")


def load_profile(name_or_path: str | Path) -> dict[str, dict[str, Any]]:
    """{parameter: {"value": v, "source": s}} from a profile YAML, whatever its exact layout."""
    path = profile_path(str(name_or_path))
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise LabError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    return normalize_profile(doc)


def normalize_profile(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    body = doc.get("params") or doc.get("parameters") or doc
    out: dict[str, dict[str, Any]] = {}

    def walk(d: dict[str, Any], prefix: str = "") -> None:
        for k, v in d.items():
            name = f"{prefix}{k}"
            if isinstance(v, dict) and "value" in v:
                out[name] = {"value": v.get("value"), "source": str(v.get("source") or "")}
            elif isinstance(v, dict):
                walk(v, "")  # a grouping level: parameter names stay unqualified
            else:
                out[name] = {"value": v, "source": ""}

    walk(body if isinstance(body, dict) else {})
    return out


def _param(profile: dict[str, dict[str, Any]], *names: str, contains: tuple[str, ...] = ()) -> tuple[str, Any, str] | None:
    for n in names:
        if n in profile:
            return n, profile[n]["value"], profile[n]["source"]
    if contains:
        for n, p in profile.items():
            if all(c in n.lower() for c in contains):
                return n, p["value"], p["source"]
    return None


def _range_ms(name: str, value: Any) -> tuple[float, float] | None:
    scale = 1000.0 if name.endswith("_s") else 1.0
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(x, (int, float)) for x in value):
        return value[0] * scale, value[1] * scale
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value * scale, value * scale
    return None


def _metrics(obs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Accept verdicts ({"metrics": {...}}) or bare metrics dicts."""
    return [o["metrics"] if "metrics" in o and isinstance(o["metrics"], dict) else o for o in obs]


def _silent(m: dict[str, Any]) -> bool:
    k = str(m.get("loss_kind") or "").lower()
    return any(w in k for w in SILENT_LOSS_KINDS)


def _range_check(name: str, values: list[float], rng: tuple[float, float], tol: float, source: str,
                 param: str) -> Behaviour:
    lo, hi = rng
    exp = f"{param} = {fmt_range([lo, hi])} ms"
    if not values:
        return Behaviour(name, exp, "-", NOT_OBSERVED, source)
    ok = min(values) >= lo * (1 - tol) and max(values) <= hi * (1 + tol)
    return Behaviour(name, exp, f"{fmt_range(values)} ms (n={len(values)})", UNCHANGED if ok else CHANGED, source,
                     {"min": min(values), "max": max(values), "n": len(values), "lo": lo, "hi": hi, "tolerance": tol})


def compare(observations: list[dict[str, Any]], profile: dict[str, Any], tolerance: float = 0.25) -> list[Behaviour]:
    """Each behaviour of the profile against what the runs observed."""
    prof = profile if all(isinstance(v, dict) and "value" in v for v in profile.values()) else normalize_profile(profile)
    ms = _metrics(observations)
    out: list[Behaviour] = []

    # 1. lockout: after a silent loss, no resume is accepted before the old connection is closed
    p = _param(prof, "resume_while_attached", "lockout", contains=("lock",))
    expect_lock = True if p is None or not isinstance(p[1], bool) else p[1]
    src = p[2] if p else "000 finding 3: every resume refused while the server holds the old connection"
    silent = [m for m in ms if _silent(m)]
    tried = [(m, [a for a in m.get("resume_attempts", []) if a.get("outcome") in ("accepted", "refused")
                  and (m.get("close_ms") is None or a.get("ms", 0) < m["close_ms"])]) for m in silent]
    n_att = sum(len(a) for _, a in tried)
    broke = sum(1 for _, a in tried for x in a if x["outcome"] == "accepted")
    if n_att == 0:
        out.append(Behaviour("lockout after a silent loss", "held" if expect_lock else "none", "-", NOT_OBSERVED, src))
    else:
        last = max((x.get("after_loss_ms") or 0) for _, a in tried for x in a)
        obs = f"{n_att - broke} of {n_att} attempts refused in {len(silent)} runs (last at +{last / 1000:.1f} s)"
        held = broke == 0
        out.append(Behaviour("lockout after a silent loss", "held" if expect_lock else "none", obs,
                             UNCHANGED if held == expect_lock else CHANGED, src,
                             {"attempts": n_att, "accepted": broke, "runs": len(silent)}))

    # 2. refusal code
    p = _param(prof, "refuse_code", "refusal_code", contains=("refus", "code"))
    codes: dict[str, int] = {}
    for m in ms:
        for c, n in (m.get("refusal_codes") or {}).items():
            if c not in ("None", "null"):
                codes[c] = codes.get(c, 0) + n
    if p is None:
        out.append(Behaviour("refusal code", "no parameter", str(codes or "-"), NOT_OBSERVED))
    elif not codes:
        out.append(Behaviour("refusal code", f"{p[0]} = {p[1]}", "-", NOT_OBSERVED, p[2]))
    else:
        obs = ", ".join(f"{c} \u00d7{n}" for c, n in sorted(codes.items()))
        out.append(Behaviour("refusal code", f"{p[0]} = {p[1]}", obs,
                             UNCHANGED if set(codes) == {str(p[1])} else CHANGED, p[2], {"codes": codes}))

    # 3. refusal delay
    p = _param(prof, "refuse_close_s", "refuse_close_ms", "refusal_delay_ms", contains=("refus", "close"))
    lat = [a["latency_ms"] for m in ms for a in m.get("resume_attempts", [])
           if a.get("outcome") == "refused" and a.get("latency_ms") is not None]
    rng = _range_ms(p[0], p[1]) if p else None
    if rng is None:
        out.append(Behaviour("refusal delay", "no parameter", fmt_range(lat), NOT_OBSERVED))
    else:
        out.append(_range_check("refusal delay", lat, rng, tolerance, p[2], p[0]))

    # 4. resume after the close of the old connection
    p = _param(prof, "resume_setup_s", "resume_after_close_s", "resume_after_close_ms")
    vals = [m["resumed_after_close_ms"] for m in ms if m.get("resumed_after_close_ms") is not None and _silent(m)]
    if p and _range_ms(p[0], p[1]):
        out.append(_range_check("resume after the close", vals, _range_ms(p[0], p[1]), tolerance, p[2], p[0]))

    # 5. new session setup (the fallback)
    p = _param(prof, "new_setup_s", "new_setup_ms")
    vals = [(m.get("recovery") or {}).get("new_setup_ms") for m in ms]
    vals = [v for v in vals if v is not None]
    if p and _range_ms(p[0], p[1]):
        out.append(_range_check("new session setup", vals, _range_ms(p[0], p[1]), tolerance, p[2], p[0]))

    # 6. goAway
    p = _param(prof, "goaway_after_s", "go_away_after_s", contains=("goaway",))
    seen = sum(int(m.get("go_away") or 0) for m in ms)
    longest = max((m.get("duration_ms") or 0 for m in ms), default=0)
    if p is None:
        out.append(Behaviour("goAway", "no parameter", f"{seen} seen", NOT_OBSERVED))
    elif not ms:
        out.append(Behaviour("goAway", f"{p[0]} = {p[1]}", "-", NOT_OBSERVED, p[2]))
    elif p[1] in (None, False):
        out.append(Behaviour("goAway", "never sent", f"{seen} seen in {len(ms)} runs (longest {longest / 1000:.0f} s)",
                             UNCHANGED if seen == 0 else CHANGED, p[2], {"seen": seen}))
    else:
        after_ms = float(p[1]) * 1000.0
        if longest < after_ms:
            out.append(Behaviour("goAway", f"after {p[1]} s", f"runs too short (longest {longest / 1000:.0f} s)",
                                 NOT_OBSERVED, p[2]))
        else:
            out.append(Behaviour("goAway", f"after {p[1]} s", f"{seen} seen", UNCHANGED if seen else CHANGED, p[2]))

    # 7. transparent mode
    p = _param(prof, "transparent_supported", contains=("transparent", "support"))
    pc = _param(prof, "transparent_reject_code")
    asked = [m for m in ms if m.get("transparent_requested")]
    if p is None:
        out.append(Behaviour("transparent mode", "no parameter", "-", NOT_OBSERVED))
    else:
        exp = "supported" if p[1] else f"refused{(' ' + str(pc[1])) if pc else ''}"
        if not asked:
            out.append(Behaviour("transparent mode", exp, "-", NOT_OBSERVED, p[2]))
        else:
            refused = sum(1 for m in asked if m.get("transparent_refused"))
            still = (refused == len(asked)) if not p[1] else (refused == 0)
            out.append(Behaviour("transparent mode", exp, f"refused in {refused} of {len(asked)} runs",
                                 UNCHANGED if still else CHANGED, p[2], {"refused": refused, "runs": len(asked)}))

    # 8. pending call still answerable after a resume
    p = _param(prof, "pending_call_answerable", "pending_call_after_resume", contains=("pending",))
    expect_ok = True if p is None or not isinstance(p[1], bool) else p[1]
    src = p[2] if p else "000 finding 1: the resumed session accepted the response for the old call id (14 of 14)"
    vals = [m["pending_call_answered_after_resume"] for m in ms if m.get("pending_call_answered_after_resume") is not None]
    if not vals:
        out.append(Behaviour("pending call after resume", "answerable" if expect_ok else "not answerable", "-",
                             NOT_OBSERVED, src))
    else:
        ok = sum(1 for v in vals if v)
        same = all(v == expect_ok for v in vals)
        out.append(Behaviour("pending call after resume", "answerable" if expect_ok else "not answerable",
                             f"answered in {ok} of {len(vals)} resumed runs", UNCHANGED if same else CHANGED, src,
                             {"answered": ok, "runs": len(vals)}))

    # 9. handle updates per connection
    p = _param(prof, "handle_updates")
    counts = [int(v) for m in ms for v in (m.get("handle_updates") or {}).values() if v]
    if p is not None and str(p[1]).lower() == "once":
        if not counts:
            out.append(Behaviour("handle updates per connection", "once", "-", NOT_OBSERVED, p[2]))
        else:
            out.append(Behaviour("handle updates per connection", "once", f"{fmt_range(counts)} per set-up connection",
                                 UNCHANGED if max(counts) == 1 else CHANGED, p[2], {"max": max(counts)}))
    return out


def render(behaviours: list[Behaviour], title: str, profile_name: str, runs: int) -> str:
    changed = [b for b in behaviours if b.status == CHANGED]
    lines = [f"# Drift: {title}", "",
             f"{runs} runs compared with the twin profile `{profile_name}`. "
             + (f"**{len(changed)} behaviour(s) changed**: {', '.join(b.name for b in changed)}." if changed
                else "No behaviour changed."), "",
             "| behaviour | profile | observed | status | source of the profile value |",
             "| --- | --- | --- | --- | --- |"]
    for b in behaviours:
        status = f"**{b.status}**" if b.status == CHANGED else b.status
        src = b.source.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {b.name} | {b.expected} | {b.observed} | {status} | {src} |")
    lines += ["", "Ranges allow a tolerance on each bound; \"not observed\" means no run in this folder exercised "
              "that behaviour.", ""]
    return "\n".join(lines)


def drift_dir(d: Path | str, profile: str = "developer-api", tolerance: float = 0.25) -> tuple[Path, list[Behaviour]]:
    """Compare every run under `d` with the profile; writes d/drift.md."""
    from lab.report.summary import load_verdict, runs_under

    d = Path(d)
    runs = runs_under(d)
    prof = load_profile(profile)
    verdicts = [load_verdict(r) for r in runs]
    behaviours = compare(verdicts, prof, tolerance)
    out = d / "drift.md"
    out.write_text(render(behaviours, d.name, profile, len(runs)))
    return out, behaviours
