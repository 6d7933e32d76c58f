"""timeline.png: one run on one time axis (seconds since the run started).

Lanes, top to bottom:

- faults: each fault window shaded across the whole figure (an unclosed fault runs to the end),
  scripted actions (abort, close, freeze) as dashed lines, the client's loss detection as a marker;
- connections: a bar per connection from open to close, labelled with its purpose, the close code
  at its end (bars cycle over three sub-rows so short resume connections stay visible);
- resume: one marker per attempt, green accepted, red refused (with the close code), grey no result;
- tool call: call, backend request, backend commit, response sent, dedup;
- user: each line said (and the heard playback windows, when recorded);
- model: first audio chunk of each turn, and each text turn coloured by what it claims.

Works on truncated records: a connection without a close runs to the last event, a missing field
is skipped. Matplotlib with the Agg backend only (no display needed).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lab.events import Event  # noqa: E402
from lab.report import claims  # noqa: E402
from lab.report.metrics import LOSS_ACTIONS  # noqa: E402

LANES = ["faults", "connections", "resume", "tool call", "user", "model"]
OUTCOME_COLOR = {"accepted": "tab:green", "refused": "tab:red", "no_result": "tab:gray"}
CLAIM_COLOR = {claims.BOOKED: "tab:green", claims.IN_PROGRESS: "tab:orange", claims.NOT_BOOKED: "tab:purple",
               claims.UNKNOWN: "tab:gray"}
PURPOSE_COLOR = {"initial": "tab:blue", "resume": "tab:cyan", "new": "tab:olive"}
MAX_LABELS = 40  # per lane: beyond this, labels only where they change


def _short(s: Any, n: int = 34) -> str:
    s = str(s or "")
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def render(events: list[Event], out: Path | str, twin: list[Event] | None = None, title: str = "") -> Path:
    """Draw the timeline of `events` (and the twin's refusals, if given) into `out`."""
    out = Path(out)
    events = sorted(events, key=lambda e: e.ms)
    y = {name: len(LANES) - 1 - i for i, name in enumerate(LANES)}
    end_s = max((e.ms for e in events), default=1000.0) / 1000.0
    end_s = max(end_s, 0.001)

    fig, ax = plt.subplots(figsize=(14, 6.5))
    ax.set_yticks([y[n] for n in LANES], LANES)
    ax.set_ylim(-0.7, len(LANES) - 0.3)
    ax.set_xlabel("seconds since run start")
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10, loc="left")
    if not events:
        ax.text(0.5, 0.5, "no events recorded", transform=ax.transAxes, ha="center", va="center")
        ax.set_xlim(0, 1)
        _save(fig, out)
        return out

    # faults: windows shaded, actions as lines
    open_faults: dict[str, float] = {}
    windows: list[tuple[str, float, float]] = []
    for e in events:
        spec = e.get("spec") if isinstance(e.get("spec"), dict) else {}
        name = str(e.get("name") or spec.get("kind") or "fault")
        if e.kind == "fault.apply":
            open_faults[name] = e.ms / 1000.0
        elif e.kind == "fault.clear":
            if name in open_faults:
                windows.append((name, open_faults.pop(name), e.ms / 1000.0))
            elif open_faults and name in ("fault", "all"):
                for k, s in list(open_faults.items()):
                    windows.append((k, s, e.ms / 1000.0))
                    open_faults.pop(k)
    windows += [(k, s, end_s) for k, s in open_faults.items()]
    for name, s, t in windows:
        ax.axvspan(s, t, color="tab:red", alpha=0.08, lw=0)
        ax.barh(y["faults"], t - s, left=s, height=0.35, color="tab:red", alpha=0.6)
        ax.text(s, y["faults"] + 0.25, _short(name, 24), fontsize=7, color="tab:red")
    for e in events:
        if e.kind == "action":
            what = str(e.get("what", ""))
            x = e.ms / 1000.0
            ax.axvline(x, color="black" if what in LOSS_ACTIONS else "gray", ls="--", lw=0.8, alpha=0.6)
            ax.text(x, y["faults"] - 0.35, what, fontsize=7, rotation=0)
        elif e.kind == "loss.detected":
            ax.plot([e.ms / 1000.0], [y["faults"]], marker="v", color="black", ms=7)
            ax.text(e.ms / 1000.0, y["faults"] - 0.5, "detected", fontsize=7)

    # connections
    conns: dict[Any, dict[str, Any]] = {}
    for e in events:
        c = e.get("conn")
        if c is None or not e.kind.startswith("conn."):
            continue
        d = conns.setdefault(c, {"open": None, "close": None, "purpose": None, "code": None, "setup": None})
        if e.kind == "conn.open" and d["open"] is None:
            d["open"], d["purpose"] = e.ms / 1000.0, e.get("purpose")
        elif e.kind == "conn.setup_complete" and d["setup"] is None:
            d["setup"] = e.ms / 1000.0
        elif e.kind == "conn.closed" and d["close"] is None:
            d["close"], d["code"] = e.ms / 1000.0, e.get("code")
    many = len(conns) > MAX_LABELS
    for i, (c, d) in enumerate(conns.items()):
        s = d["open"] if d["open"] is not None else (d["setup"] if d["setup"] is not None else d["close"])
        if s is None:
            continue
        t = d["close"] if d["close"] is not None else end_s
        yy = y["connections"] + (i % 3 - 1) * 0.22
        ax.barh(yy, max(t - s, end_s / 2000.0), left=s, height=0.18,
                color=PURPOSE_COLOR.get(d["purpose"], "tab:gray"), alpha=0.85)
        if d["setup"] is not None:
            ax.plot([d["setup"]], [yy], marker="|", color="black", ms=6)
        if not many or d["purpose"] != "resume":
            ax.text(s, yy + 0.1, f"{c} {d['purpose'] or ''}", fontsize=6)
        if d["code"] is not None and (not many or i < MAX_LABELS):
            ax.text(t, yy - 0.05, str(d["code"]), fontsize=6, color="tab:red")

    # resume attempts
    results = [e for e in events if e.kind == "resume.result"]
    attempts = [e for e in events if e.kind == "resume.attempt"]
    last_code = object()
    for i, a in enumerate(attempts):
        r = next((x for x in results if x.get("attempt") == a.get("attempt") and x.ms >= a.ms), None)
        outcome = "no_result" if r is None else ("accepted" if r.get("ok") else "refused")
        ax.plot([a.ms / 1000.0], [y["resume"]], marker="o", ms=5, color=OUTCOME_COLOR[outcome], alpha=0.85)
        code = r.get("code") if r is not None else None
        if code is not None and (len(attempts) <= MAX_LABELS or code != last_code):
            ax.text(a.ms / 1000.0, y["resume"] + 0.12 + 0.14 * (i % 2), str(code), fontsize=6)
        if outcome == "accepted":
            ax.text(a.ms / 1000.0, y["resume"] - 0.3, "accepted", fontsize=7, color="tab:green")
        last_code = code
    if not attempts:
        for r in results:
            ax.plot([r.ms / 1000.0], [y["resume"]], marker="o", ms=5,
                    color=OUTCOME_COLOR["accepted" if r.get("ok") else "refused"])
    for e in twin or []:
        if e.kind == "twin.refuse":
            ax.plot([e.ms / 1000.0], [y["resume"] - 0.2], marker="x", ms=4, color="tab:red", alpha=0.5)

    # tool-call lifecycle
    marks = {"tool.call": ("^", "tab:blue", "call"), "backend.request": ("s", "tab:gray", "request"),
             "backend.commit": ("*", "tab:green", "commit"), "tool.response": ("D", "tab:cyan", "response"),
             "tool.dedup": ("x", "tab:orange", "dedup")}
    for j, e in enumerate(x for x in events if x.kind in marks):
        m, col, label = marks[e.kind]
        ax.plot([e.ms / 1000.0], [y["tool call"]], marker=m, ms=8 if m == "*" else 6, color=col)
        ax.text(e.ms / 1000.0, y["tool call"] + 0.15 + 0.15 * (j % 2), label, fontsize=6, color=col)

    # user
    for j, e in enumerate(x for x in events if x.kind == "user.say"):
        ax.plot([e.ms / 1000.0], [y["user"]], marker=">", ms=6, color="black")
        ax.text(e.ms / 1000.0, y["user"] + 0.15 + 0.15 * (j % 2), _short(e.get("text")), fontsize=7)
    for e in events:
        if e.kind == "user.heard" and e.get("start_ms") is not None and e.get("end_ms") is not None:
            s, t = e.get("start_ms") / 1000.0, e.get("end_ms") / 1000.0
            ax.barh(y["user"] - 0.25, max(t - s, 0.01), left=s, height=0.12, color="tab:purple", alpha=0.5)

    # model
    audio = [e for e in events if e.kind == "model.audio"]
    marked = any(e.get("first") for e in audio)  # clients mark the first chunk of each turn
    for e in audio:
        if e.get("first") or not marked:
            ax.plot([e.ms / 1000.0], [y["model"] - 0.15], marker="|", ms=9, color="tab:blue")
    for j, e in enumerate(x for x in events if x.kind == "model.text"):
        cls = claims.classify(e.get("text"))
        ax.plot([e.ms / 1000.0], [y["model"]], marker="o", ms=6, color=CLAIM_COLOR[cls])
        ax.text(e.ms / 1000.0, y["model"] + 0.15 + 0.15 * (j % 2), _short(e.get("text")), fontsize=7,
                color=CLAIM_COLOR[cls])

    ax.set_xlim(min(0.0, events[0].ms / 1000.0), end_s * 1.02 + 0.05)
    _save(fig, out)
    return out


def _save(fig: Any, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.png")
    fig.tight_layout()
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out)
