"""timeline.png: one run on one time axis (seconds since the run started), every mark in the legend.

Lanes, top to bottom:

- faults: each fault window shaded across the whole figure (an unclosed fault runs to the end),
  scripted actions (abort, close, freeze) as dashed lines, the loss (the agent's `loss` event) and
  the client's detection of it as markers;
- connections: a bar per connection from open to close, labelled with its purpose, the close code
  at its end (bars cycle over three sub-rows so short resume connections stay visible);
- resume: one marker per attempt, green accepted, red refused (with the close code), grey no result;
- twin: the twin's own marks from twin.jsonl (refusals, accepted setups, freeze closes, GoAways);
- tool call: call, backend request, backend commit, response sent, dedup;
- user: each line said, and what the user heard (the playback windows, when recorded);
- model: first audio chunk of each turn, and each text turn coloured by what it claims.

Drawing happens in two steps: `layout()` turns the record into marks (a style key, a lane, a time),
`draw()` paints them; the legend is built from the styles of the marks drawn, so nothing is drawn
that the legend does not name. The twin's marks are placed by wall time (`t`, the clock every
record shares) against the run's start, so they land right even in a twin.jsonl that counted `ms`
from its own start (runs made before the twin got the run's `--t0`).

Works on truncated records: a connection without a close runs to the last event, a missing field
is skipped. Matplotlib with the Agg backend only (no display needed).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from lab.conversation.semantics import ActionWords  # noqa: E402
from lab.events import Event  # noqa: E402
from lab.report import claims, run_tools  # noqa: E402

LANES = ["faults", "connections", "resume", "twin", "tool call", "user", "model"]
MAX_LABELS = 40  # per lane: beyond this, labels only where they change


@dataclass(frozen=True)
class Style:
    label: str                 # the legend entry
    color: str
    draw: str = "mark"         # mark | bar | vline | window (a bar and the whole figure shaded) | label
    marker: str = "o"
    size: float = 6
    alpha: float = 0.85


STYLES: dict[str, Style] = {
    "fault": Style("fault in force", "tab:red", "window", alpha=0.6),
    "action": Style("scripted action (abort, close, freeze ...)", "gray", "vline"),
    "loss": Style("loss: the path cut (the agent's record)", "tab:red", marker="X", size=8),
    "detected": Style("the client detected the loss", "black", marker="v", size=7),
    "conn.initial": Style("connection: initial", "tab:blue", "bar"),
    "conn.resume": Style("connection: resume", "tab:cyan", "bar"),
    "conn.new": Style("connection: new session", "tab:olive", "bar"),
    "conn.other": Style("connection: other", "tab:gray", "bar"),
    "conn.setup": Style("setup complete", "black", marker="|"),
    "conn.code": Style("close code", "tab:red", "label"),      # text only: no legend entry
    "resume.accepted": Style("resume accepted", "tab:green", marker="o", size=5),
    "resume.refused": Style("resume refused (close code above)", "tab:red", marker="o", size=5),
    "resume.no_result": Style("resume without a result", "tab:gray", marker="o", size=5),
    "twin.refuse": Style("twin: refused a connection", "tab:red", marker="x", size=6),
    "twin.accept": Style("twin: accepted a setup", "tab:green", marker="+", size=7),
    "twin.freeze_close": Style("twin: closed a frozen connection", "tab:brown", marker="s", size=5),
    "twin.goaway": Style("twin: sent GoAway", "tab:orange", marker="d", size=6),
    "tool.call": Style("tool call", "tab:blue", marker="^"),
    "backend.request": Style("backend request", "tab:gray", marker="s"),
    "backend.commit": Style("backend commit", "tab:green", marker="*", size=8),
    "tool.response": Style("tool response sent", "tab:cyan", marker="D"),
    "tool.dedup": Style("tool call deduplicated", "tab:orange", marker="x"),
    "user.say": Style("user said a line", "black", marker=">"),
    "user.heard": Style("what the user heard (playback)", "tab:purple", "bar", alpha=0.5),
    "model.audio": Style("model audio: first chunk of a turn", "tab:blue", marker="|", size=9),
    **{f"model.text.{c}": Style(f"model text: {c}", col) for c, col in (
        (claims.BOOKED, "tab:green"), (claims.IN_PROGRESS, "tab:orange"), (claims.NOT_BOOKED, "tab:purple"),
        (claims.UNKNOWN, "tab:gray"))},
}
TWIN_MARKS = ("twin.refuse", "twin.accept", "twin.freeze_close", "twin.goaway")
TOOL_MARKS = ("tool.call", "backend.request", "backend.commit", "tool.response", "tool.dedup")


@dataclass(frozen=True)
class Mark:
    style: str                 # a key of STYLES
    lane: str
    x: float                   # seconds since the run started
    x2: float | None = None    # the end, for bars and windows
    dy: float = 0.0            # offset inside the lane
    text: str | None = None
    text_dy: float = 0.15


def _short(s: Any, n: int = 34) -> str:
    s = str(s or "")
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def run_start(events: list[Event]) -> float | None:
    """The run's t0 on the wall clock: every event's `t` minus its `ms`."""
    return next((e.t - e.ms / 1000.0 for e in events), None)


def layout(events: list[Event], twin: list[Event] | None = None) -> list[Mark]:
    """The marks of one run, in seconds since its start."""
    events = sorted(events, key=lambda e: e.ms)
    end_s = max(max((e.ms for e in events), default=1000.0) / 1000.0, 0.001)
    marks = _faults(events, end_s) + _connections(events, end_s) + _resumes(events)
    t0 = run_start(events)
    if t0 is not None:
        marks += [Mark(e.kind, "twin", e.t - t0, dy=-0.1) for e in twin or [] if e.kind in TWIN_MARKS]
    marks += [Mark(e.kind, "tool call", e.ms / 1000.0, text=STYLES[e.kind].label.split()[-1],
                   text_dy=0.15 + 0.15 * (j % 2))
              for j, e in enumerate(x for x in events if x.kind in TOOL_MARKS)]
    # a turn is coloured by what it says about the run's own action (lab.report.run_tools)
    return marks + _user(events) + _model(events, run_tools.of_run(twin).words)


def _faults(events: list[Event], end_s: float) -> list[Mark]:
    open_faults: dict[str, float] = {}
    marks: list[Mark] = []
    for e in events:
        spec = e.get("spec") if isinstance(e.get("spec"), dict) else {}
        name = str(e.get("name") or spec.get("kind") or "fault")
        x = e.ms / 1000.0
        if e.kind == "fault.apply":
            open_faults[name] = x
        elif e.kind == "fault.clear":
            if name in open_faults:
                marks.append(Mark("fault", "faults", open_faults.pop(name), x, text=_short(name, 24), text_dy=0.25))
            elif open_faults and name in ("fault", "all"):
                marks += [Mark("fault", "faults", s, x, text=_short(k, 24), text_dy=0.25) for k, s in open_faults.items()]
                open_faults.clear()
        elif e.kind == "action":
            marks.append(Mark("action", "faults", x, text=str(e.get("what", "")), text_dy=-0.35))
        elif e.kind == "loss":
            marks.append(Mark("loss", "faults", x, dy=0.12))
        elif e.kind == "loss.detected":
            marks.append(Mark("detected", "faults", x, text="detected", text_dy=-0.5))
    return marks + [Mark("fault", "faults", s, end_s, text=_short(k, 24), text_dy=0.25) for k, s in open_faults.items()]


def _connections(events: list[Event], end_s: float) -> list[Mark]:
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
    marks: list[Mark] = []
    for i, (c, d) in enumerate(conns.items()):
        s = d["open"] if d["open"] is not None else (d["setup"] if d["setup"] is not None else d["close"])
        if s is None:
            continue
        t = d["close"] if d["close"] is not None else end_s
        dy = (i % 3 - 1) * 0.22
        style = f"conn.{d['purpose']}" if f"conn.{d['purpose']}" in STYLES else "conn.other"
        label = f"{c} {d['purpose'] or ''}" if not many or d["purpose"] != "resume" else None
        marks.append(Mark(style, "connections", s, max(t, s + end_s / 2000.0), dy=dy, text=label, text_dy=dy + 0.1))
        if d["setup"] is not None:
            marks.append(Mark("conn.setup", "connections", d["setup"], dy=dy))
        if d["code"] is not None and (not many or i < MAX_LABELS):
            marks.append(Mark("conn.code", "connections", t, text=str(d["code"]), text_dy=dy - 0.05))
    return marks


def _resumes(events: list[Event]) -> list[Mark]:
    results = [e for e in events if e.kind == "resume.result"]
    attempts = [e for e in events if e.kind == "resume.attempt"]
    if not attempts:
        return [Mark("resume.accepted" if r.get("ok") else "resume.refused", "resume", r.ms / 1000.0) for r in results]
    marks: list[Mark] = []
    last_code = object()
    for i, a in enumerate(attempts):
        r = next((x for x in results if x.get("attempt") == a.get("attempt") and x.ms >= a.ms), None)
        outcome = "no_result" if r is None else ("accepted" if r.get("ok") else "refused")
        code = r.get("code") if r is not None else None
        text = None
        if outcome == "accepted":
            text = "accepted"
        elif code is not None and (len(attempts) <= MAX_LABELS or code != last_code):
            text = str(code)
        marks.append(Mark(f"resume.{outcome}", "resume", a.ms / 1000.0, text=text,
                          text_dy=-0.3 if outcome == "accepted" else 0.12 + 0.14 * (i % 2)))
        last_code = code
    return marks


def _user(events: list[Event]) -> list[Mark]:
    marks = [Mark("user.say", "user", e.ms / 1000.0, text=_short(e.get("text")), text_dy=0.15 + 0.15 * (j % 2))
             for j, e in enumerate(x for x in events if x.kind == "user.say")]
    for e in events:
        if e.kind == "user.heard" and e.get("start_ms") is not None and e.get("end_ms") is not None:
            s, t = e.get("start_ms") / 1000.0, e.get("end_ms") / 1000.0
            marks.append(Mark("user.heard", "user", s, s + max(t - s, 0.01), dy=-0.25))
    return marks


def _model(events: list[Event], words: ActionWords | None = None) -> list[Mark]:
    audio = [e for e in events if e.kind == "model.audio"]
    marked = any(e.get("first") for e in audio)  # clients mark the first chunk of each turn
    marks = [Mark("model.audio", "model", e.ms / 1000.0, dy=-0.15) for e in audio if e.get("first") or not marked]
    for j, e in enumerate(x for x in events if x.kind == "model.text"):
        marks.append(Mark(f"model.text.{claims.classify(e.get('text'), words)}", "model", e.ms / 1000.0,
                          text=_short(e.get("text")), text_dy=0.15 + 0.15 * (j % 2)))
    return marks


def draw(marks: list[Mark], end_s: float, start_s: float = 0.0, title: str = "") -> Any:
    """A figure of `marks`, with a legend entry for every style drawn."""
    y = {name: len(LANES) - 1 - i for i, name in enumerate(LANES)}
    fig, ax = plt.subplots(figsize=(16, 7))
    ax.set_yticks([y[n] for n in LANES], LANES)
    ax.set_ylim(-0.7, len(LANES) - 0.3)
    ax.set_xlabel("seconds since run start")
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10, loc="left")
    for m in marks:
        st, yy = STYLES[m.style], y[m.lane] + m.dy
        if st.draw in ("bar", "window") and m.x2 is not None and m.x2 > m.x:
            if st.draw == "window":
                ax.axvspan(m.x, m.x2, color=st.color, alpha=0.08, lw=0)
            ax.barh(yy, m.x2 - m.x, left=m.x, height=0.35 if st.draw == "window" else 0.18,
                    color=st.color, alpha=st.alpha)
        elif st.draw == "vline":
            ax.axvline(m.x, color=st.color, ls="--", lw=0.8, alpha=0.6)
        elif st.draw == "mark":
            ax.plot([m.x], [yy], marker=st.marker, ms=st.size, color=st.color, alpha=st.alpha, ls="none")
        if m.text:
            ax.text(m.x, y[m.lane] + m.text_dy, m.text, color=st.color,
                    fontsize=6 if m.lane in ("connections", "resume", "tool call") else 7)
    used = list(dict.fromkeys(m.style for m in marks if STYLES[m.style].draw != "label"))
    if used:
        ax.legend(handles=[_handle(STYLES[k]) for k in used], loc="upper left", bbox_to_anchor=(1.005, 1.0),
                  fontsize=7, frameon=False)
    ax.set_xlim(min(0.0, start_s), end_s * 1.02 + 0.05)
    return fig


def _handle(st: Style) -> Any:
    if st.draw in ("bar", "window"):
        return Patch(color=st.color, alpha=st.alpha, label=st.label)
    if st.draw == "vline":
        return Line2D([], [], color=st.color, ls="--", lw=0.8, label=st.label)
    return Line2D([], [], color=st.color, marker=st.marker, ms=st.size, ls="none", label=st.label)


# pyplot's figures are the process's state, not a thread's: runs reported side by side in one
# process (`lab matrix -j N`) draw one at a time
_DRAW = threading.Lock()


def render(events: list[Event], out: Path | str, twin: list[Event] | None = None, title: str = "") -> Path:
    """Draw the timeline of `events` (and the twin's own marks, if given) into `out`."""
    with _DRAW:
        return _render(events, Path(out), twin, title)


def _render(events: list[Event], out: Path, twin: list[Event] | None, title: str) -> Path:
    if not events:
        fig = draw([], 1.0, title=title)
        fig.axes[0].text(0.5, 0.5, "no events recorded", transform=fig.axes[0].transAxes, ha="center", va="center")
        _save(fig, out)
        return out
    marks = layout(events, twin)
    end_s = max(max(e.ms for e in events) / 1000.0, 0.001)
    _save(draw(marks, end_s, start_s=min(e.ms for e in events) / 1000.0, title=title), out)
    return out


def _save(fig: Any, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.png")
    fig.tight_layout()
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out)
