"""report.html of one run: the verdict, each expectation and rule with its evidence and what to change,
an interactive timeline, the conversation beside the connections and faults, the capture and the raw files.

    write(run_dir, verdict, events, twin, batch_dir=None)   -> run_dir/report.html

Self-contained and offline: plotly's own script, shipped in the plotly package (no CDN), is the
batch's one plotly.min.js, loaded by a relative path, or inline for a run folder alone
(lab/report/plotly_js.py). The figure is plotly.js's JSON, built as plain dicts and encoded once.
The timeline's lanes and marks are lab/report/timeline.py's (`layout`); each mark's hover shows the
fields of the events it stands for, and every event no mark stands for is a small grey point in
its lane, so each event of events.jsonl and twin.jsonl can be hovered. The twin's events are placed
by wall time against the run's start, as timeline.png places them.
"""
from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any

from matplotlib.colors import to_hex

from lab import metric_names
from lab.events import Event
from lab.report import plotly_js, timeline
from lab.report.page import RUN_PAGE as PAGE
from lab.report.page import esc, outcome_class, shell, table, write as write_page
from lab.report.rules import RULES
from lab.report.arguments import describe as describe_defaulted
from lab.report.verdict import REPRODUCTION, protocol_of, reproduction_word

TWIN_MARK = "\u2020"        # the summary's mark (lab.report.summary.TWIN_MARK) for a twin input echoed back
SYMBOLS = {"o": "circle", "X": "x", "v": "triangle-down", "|": "line-ns-open", "x": "x-thin-open",
           "+": "cross-thin-open", "s": "square", "d": "diamond", "^": "triangle-up", "*": "star",
           "D": "diamond-wide", ">": "triangle-right"}
# the lane of an event that no mark of timeline.layout stands for, by its kind's first word
LANE_OF_PREFIX = {"fault": "faults", "loss": "faults", "action": "faults", "network": "faults", "run": "faults",
                  "step": "faults", "conn": "connections", "handle": "connections", "resume": "resume",
                  "fallback": "resume", "twin": "twin", "tool": "tool call", "backend": "tool call",
                  "guard": "tool call", "user": "user", "video": "user", "model": "model", "session": "model",
                  "client": "faults"}
# a mark's style -> the event kinds it may stand for (the first word of the style otherwise)
STYLE_KINDS = {"fault": ("fault.apply", "fault.clear"), "detected": ("loss.detected",), "loss": ("loss",),
               "action": ("action",), "conn.setup": ("conn.setup_complete",), "conn.code": ("conn.closed",),
               "user.heard": ("user.heard",)}
RAW_FILES = ("capture.pcapng", "events.jsonl", "twin.jsonl", "frames.jsonl", "run.json", "plan.json", "verdict.json",
             "timeline.png", "phases.json", "scenario.yaml", "summary.md")


# ---- the timeline -----------------------------------------------------------------------------------
def _placed(events: list[Event], twin: list[Event] | None) -> list[tuple[float, Event]]:
    """Every event with its x (seconds since the run's start), the twin's by wall time."""
    t0 = timeline.run_start(events)
    out = [(e.ms / 1000.0, e) for e in events]
    if t0 is not None:
        out += [(e.t - t0, e) for e in twin or []]
    return sorted(out, key=lambda p: p[0])


def _hover_esc(s: Any) -> str:
    # plotly's hover labels read <b>, <br> and entities, not attributes: quotes need no escaping,
    # and left as they are they cost one JSON character instead of six
    return html.escape("" if s is None else str(s), quote=False)


def _fields(x: float, e: Event) -> str:
    rows = [f"<b>{_hover_esc(e.kind)}</b> at {x:.3f} s ({_hover_esc(e.src)})"]
    for k, v in e.data.items():
        s = json.dumps(v, default=str, ensure_ascii=False) if not isinstance(v, str) else v
        rows.append(f"{_hover_esc(k)}: {_hover_esc(s if len(s) <= 100 else s[:99] + chr(0x2026))}")
    return "<br>".join(rows)


def _kinds(style: str) -> tuple[str, ...]:
    return STYLE_KINDS.get(style, ()) or (style.rsplit(".", 1)[0] if style.startswith("model.text") else style,)


def _x(x: float | None) -> float | None:
    # a tenth of a millisecond is finer than any record's clock; the digits beyond it only weigh
    return None if x is None else round(x, 4)


def _scatter(**props: Any) -> dict[str, Any]:
    return {"type": "scatter", **props}


def timeline_figure(events: list[Event], twin: list[Event] | None = None) -> dict[str, Any]:
    """The run's timeline as a plotly figure, {"data": traces, "layout": ...} in plotly.js's own
    terms: lanes and marks as timeline.png, hover with each event's fields. Plain dicts, not
    plotly.graph_objects: the page only hands them to plotly.js, and the Python objects' validation
    of every property would be most of the page's cost (tests/unit/test_pages.py validates them)."""
    lanes = {name: len(timeline.LANES) - 1 - i for i, name in enumerate(timeline.LANES)}
    placed = _placed(events, twin)
    used: set[int] = set()
    by_kind: dict[str, list[int]] = {}
    for i, (_, e) in enumerate(placed):
        by_kind.setdefault(e.kind, []).append(i)

    def hover(style: str, x: float) -> str:
        kinds = _kinds(style)
        near = sorted(i for kind, idx in by_kind.items() if any(kind == k or kind.startswith(k + ".") for k in kinds)
                      for i in idx if abs(placed[i][0] - x) < 0.0006)
        used.update(near)
        return "<br>".join(_fields(*placed[i]) for i in near) or f"{_hover_esc(timeline.STYLES[style].label)} at {x:.3f} s"

    traces: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    marks = timeline.layout(events, twin)
    by_style: dict[str, list[timeline.Mark]] = {}
    for m in marks:
        by_style.setdefault(m.style, []).append(m)
    for style, ms in by_style.items():
        st = timeline.STYLES[style]
        color = to_hex(st.color)
        if st.draw in ("bar", "window"):
            xs: list[float | None] = []
            ys: list[float | None] = []
            texts: list[str | None] = []
            for m in ms:
                end = m.x2 if m.x2 is not None else m.x
                y = lanes[m.lane] + m.dy
                h = hover(style, m.x) + (f"<br>{_hover_esc(m.text)}" if m.text else "") + f"<br>until {end:.3f} s"
                xs += [_x(m.x), _x(end), None]
                ys += [y, y, None]
                texts += [h, h, None]
                if st.draw == "window":
                    shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": _x(m.x), "x1": _x(end), "y0": 0,
                                   "y1": 1, "fillcolor": color, "opacity": 0.08, "line": {"width": 0}})
            traces.append(_scatter(x=xs, y=ys, mode="lines", name=st.label, line={"color": color, "width": 7},
                                   opacity=st.alpha, hovertext=texts, hoverinfo="text"))
        elif st.draw == "label":
            traces.append(_scatter(x=[_x(m.x) for m in ms], y=[lanes[m.lane] + m.text_dy for m in ms],
                                   mode="text", text=[m.text for m in ms], textfont={"color": color, "size": 9},
                                   showlegend=False, hovertext=[hover(style, m.x) for m in ms], hoverinfo="text"))
        else:
            if st.draw == "vline":
                shapes += [{"type": "line", "xref": "x", "yref": "paper", "x0": _x(m.x), "x1": _x(m.x), "y0": 0, "y1": 1,
                            "line": {"color": color, "dash": "dash", "width": 1}} for m in ms]
            traces.append(_scatter(
                x=[_x(m.x) for m in ms], y=[lanes[m.lane] + m.dy for m in ms], mode="markers", name=st.label,
                marker={"color": color, "symbol": SYMBOLS.get(st.marker, "circle"), "size": st.size + 4},
                opacity=st.alpha,
                hovertext=[hover(style, m.x) + (f"<br>{_hover_esc(m.text)}" if m.text else "") for m in ms],
                hoverinfo="text"))
    rest = [(px, e) for i, (px, e) in enumerate(placed) if i not in used]
    if rest:
        traces.append(_scatter(
            x=[_x(px) for px, _ in rest], y=[lanes[_lane_of(e.kind)] - 0.32 for _, e in rest], mode="markers",
            name="other events (hover for their fields)", marker={"color": "#999", "size": 5, "symbol": "circle-open"},
            hovertext=[_fields(px, e) for px, e in rest], hoverinfo="text"))
    layout = {
        "height": 560, "margin": {"l": 90, "r": 20, "t": 30, "b": 50}, "hovermode": "closest", "shapes": shapes,
        "xaxis": {"title": {"text": "seconds since run start"}, "zeroline": False},
        "yaxis": {"tickvals": list(lanes.values()), "ticktext": list(lanes), "range": [-0.7, len(lanes) - 0.3],
                  "fixedrange": True, "zeroline": False},     # y 0 is the lowest lane, not a value
        "legend": {"font": {"size": 10}}, "plot_bgcolor": "white"}
    return {"data": traces, "layout": layout}


PLOT_CONFIG = {"responsive": True, "displaylogo": False}
PLOT_ID = "timeline"


def plot(fig: dict[str, Any]) -> str:
    """The figure's <div> and the call that draws it, its data encoded once. Without plotly (the
    batch's plotly.min.js not beside the run folder: one copied out alone) the div says so."""
    args = json.dumps([PLOT_ID, fig["data"], fig["layout"], PLOT_CONFIG], separators=(",", ":"),
                      ensure_ascii=False, default=str).replace("</", "<\\/")
    missing = (f"The timeline needs plotly's script ({plotly_js.SCRIPT}, beside this run's folder in its batch): "
               "`lab report` on this run folder alone writes the page with the script inside.")
    return (f"<div id=\"{PLOT_ID}\" style=\"height:{fig['layout']['height']}px;width:100%\"></div>\n<script>"
            f"if (window.Plotly) {{ Plotly.newPlot(...{args}); }} else {{ document.getElementById({json.dumps(PLOT_ID)})"
            f".textContent = {json.dumps(missing)}; }}</script>")


def _lane_of(kind: str) -> str:
    return LANE_OF_PREFIX.get(kind.split(".", 1)[0], "faults")


# ---- the conversation, the connections and the faults -----------------------------------------------
def _say(e: Event) -> tuple[str, str, str] | None:
    """(who, what, row class) of a conversation event; None for one that is not."""
    k = e.kind
    if k == "user.say":
        return "user said", f"\u201c{esc(e.get('text'))}\u201d" + _muted(f"line {e.get('line')}, {e.get('mode') or 'text'}"), "user"
    if k == "user.status":
        return "the client told the user", esc(e.get("text") or e.get("status")), "user"
    if k == "twin.user":
        return "the model heard a user turn", _muted(", ".join(f"{f}: {e.get(f)}" for f in ("source", "intent", "session")
                                                               if e.get(f) is not None)), "user"
    if k in ("twin.say", "model.text"):
        return "model said", f"\u201c{esc(e.get('text'))}\u201d" + _muted(_where(e)), "model"
    if k in ("twin.tool_call", "tool.call"):
        return ("tool call", f"<code>{esc(e.get('name'))}({esc(json.dumps(e.get('args'), default=str))})</code>"
                + _muted(f"id {e.get('id')}" + (f", {_where(e)}" if _where(e) else "")), "tool")
    if k in ("twin.tool_response", "tool.response"):
        extra = "" if e.get("known") is not False else ", for an id this session never issued"
        return ("tool result", esc(json.dumps(e.get("response") or e.get("result") or e.get("status"), default=str))
                + _muted(f"id {e.get('id')}" + (f", {_where(e)}" if _where(e) else "") + extra), "tool")
    if k == "twin.restore":
        return "restore", _muted(f"{e.get('turns')} turn(s), status note: {e.get('note')}, {_where(e)}"), "tool"
    if k == "backend.commit":
        return "backend committed", esc(e.get("business_key")) + _muted(f"job {e.get('job')}, call {e.get('call_id')}"), "tool"
    return None


def _where(e: Event) -> str:
    return ", ".join(f"{f} {e.get(f)}" for f in ("session", "conn") if e.get(f) is not None)


def _muted(s: str) -> str:
    return f" <span class=\"muted\">({esc(s)})</span>" if s else ""


NET_KINDS = ("fault.apply", "fault.clear", "loss", "loss.detected", "action", "network.switch", "conn.open",
             "conn.closed", "twin.accept", "twin.refuse", "twin.conn.end", "twin.goaway", "twin.freeze_close",
             "twin.goaway_close", "twin.session_cap")


def _net(e: Event) -> str:
    skip = {"spec", "local", "remote", "peer", "handle_sha", "handle_len", "modalities"}
    parts = [f"{k} {v}" for k, v in e.data.items() if k not in skip and v is not None and not isinstance(v, (dict, list))]
    spec = e.get("spec") if isinstance(e.get("spec"), dict) else None
    if spec:
        parts.append("spec " + json.dumps({k: v for k, v in spec.items() if k != "target"}, default=str))
    return f"<b>{esc(e.kind)}</b> " + esc(", ".join(parts))


def conversation(events: list[Event], twin: list[Event] | None) -> tuple[list[list[str]], list[str]]:
    """The conversation's rows (time, who, what) and their classes, as the user and the model had it:
    the twin's record of the model when there is one (a live run: the client's)."""
    model_side = ("twin.say", "twin.tool_call", "twin.tool_response", "twin.user", "twin.restore") if twin else \
        ("model.text", "tool.call", "tool.response")
    rows, classes = [], []
    for x, e in _placed(events, twin):
        if e.kind.startswith("twin.") or e.kind in ("model.text", "tool.call", "tool.response"):
            if e.kind not in model_side:
                continue
        said = _say(e)
        if said is not None:
            rows.append([f"<span class=\"t\">{x:.2f} s</span>", f"<span class=\"who\">{esc(said[0])}</span>", said[1]])
            classes.append(said[2])
    return rows, classes


def network(events: list[Event], twin: list[Event] | None) -> list[list[str]]:
    return [[f"<span class=\"t\">{x:.2f} s</span>", _net(e)] for x, e in _placed(events, twin) if e.kind in NET_KINDS]


def _rows_table(rows: list[list[str]], classes: list[str], head: list[str]) -> str:
    if not rows:
        return "<p class=\"muted\">nothing recorded</p>"
    body = "".join(f"<tr class=\"{c}\">" + "".join(f"<td>{x}</td>" for x in r) + "</tr>" for r, c in zip(rows, classes))
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + body + "</table>"


# ---- the capture ---------------------------------------------------------------------------------------
def story_filter(events: list[Event]) -> str:
    """The Wireshark display filter that shows the run's story: the timeline markers (frame comments),
    what the faults dropped (nflog), and the client's connections' WebSocket frames, handshakes, ends
    and retransmissions."""
    ports = sorted({str(e.get("local")).rsplit(":", 1)[1] for e in events
                    if e.kind == "conn.open" and isinstance(e.get("local"), str) and ":" in e.get("local")})
    # `tcp.port == a || ...`, not a set: the set's separator changed between Wireshark releases
    conns = ("(" + " || ".join(f"tcp.port == {p}" for p in ports) + ") && " if ports else "")
    return (f"frame.comment || nflog || ({conns}(websocket || tcp.flags.syn == 1 || tcp.flags.fin == 1 || "
            "tcp.flags.reset == 1 || tcp.analysis.retransmission))")


# ---- the page ------------------------------------------------------------------------------------------
def _advice(text: str | None) -> str:
    return f"<div class=\"advice\">{esc(text)}</div>" if text else ""


def _expectations(v: dict[str, Any]) -> str:
    rows, cls = [], []
    for r in v.get("expectations") or []:
        held = {True: "pass", False: "fail", None: "n/a"}[r.get("held")]
        mark = f" <span class=\"mark\" title=\"a twin input echoed back\">{TWIN_MARK}</span>" \
            if r.get("origin") == metric_names.TWIN_INPUT else ""
        rows.append([f"<code>{esc(r['name'])}</code>", esc(r.get("expected")), esc(r.get("observed")) + mark,
                     esc(held), esc(r.get("origin") or "-"), esc(r.get("note") or "") + _advice(r.get("advice"))])
        cls.append(["", "", "", outcome_class(held), "", ""])
    if not rows:
        return ""
    return table(["expectation", "expected", "observed", "outcome", "origin", "note / what to change"], rows, cls)


def _outcomes(v: dict[str, Any]) -> str:
    rows, cls = [], []
    for name, o in (v.get("outcomes") or {}).items():
        behind = o.get("rules_failed") or []
        rows.append([f"<code>{esc(name)}</code><br><span class=\"muted\">{esc(o.get('about') or '')}</span>",
                     esc(o.get("status")), esc(o.get("observed")) + _advice(o.get("advice"))
                     + (f"<p class=\"muted\">rules behind it that failed: {esc(', '.join(behind))}</p>" if behind else "")])
        cls.append(["", outcome_class(o.get("status")), ""])
    if not rows:
        return "<p>The user outcomes were not judged for this run.</p>"
    return table(["user outcome", "outcome", "what the run showed / what to change"], rows, cls)


def _defaulted(v: dict[str, Any]) -> str:
    rows = describe_defaulted(v.get("defaulted_args") or [])
    if not rows:
        return ""
    return ("<p id=\"defaulted\">Arguments the lines did not give (the twin's model used a default):</p><ul>"
            + "".join(f"<li>{esc(r)}</li>" for r in rows) + "</ul>")


def _reproduction_note(v: dict[str, Any]) -> str:
    if not v.get("expectations"):
        return ("<p class=\"muted\">No reproduction rows for this client: the scenario's <code>expect:</code> holds "
                "the study's client (or a client it names) to what the study saw.</p>")
    held = ("this run is held to them (the study's own client)" if v.get("held_to") == REPRODUCTION
            else "shown for comparison; this run is held to its user outcomes")
    return f"<p class=\"muted\">What the study's client saw, from the scenario's <code>expect:</code>: {esc(held)}.</p>"


def _rules(v: dict[str, Any]) -> str:
    rows, cls = [], []
    for i, (name, o) in enumerate((v.get("rules") or {}).items(), 1):
        rule = RULES.get(name)
        rows.append([f"R{i}", f"<code>{esc(name)}</code>" + (f"<br><span class=\"muted\">{esc(rule.about)}</span>" if rule else ""),
                     esc(rule.source if rule else ""), esc(o.get("status")), esc(o.get("observed")) + _advice(o.get("advice"))])
        cls.append(["", "", "", outcome_class(o.get("status")), ""])
    if not rows:
        return "<p>The rules were not judged for this run.</p>"
    return table(["", "rule", "source", "outcome", "what the run showed / what to change"], rows, cls)


def _figures(v: dict[str, Any]) -> str:
    m = v.get("metrics") or {}
    rows = []
    for name in metric_names.scalar_names():
        val = m.get(name)
        if val is None or name in ("answer_text", "first_text_after_recovery", "error"):
            continue
        twin_input = metric_names.origin(name) == metric_names.TWIN_INPUT
        rows.append([f"<code>{esc(name)}</code>" + (f" <span class=\"mark\">{TWIN_MARK}</span>" if twin_input else ""),
                     esc(val), esc(metric_names.METRICS[name].about),
                     "twin input" if twin_input else "emerged"])
    return table(["figure", "value", "what it is", "origin"], rows)


def _files(run_dir: Path) -> str:
    links = [f"<li><a href=\"{esc(n)}\">{esc(n)}</a></li>" for n in RAW_FILES if (run_dir / n).is_file()]
    others = sorted(p.name for p in run_dir.iterdir() if p.is_file() and p.name not in RAW_FILES and p.name != PAGE
                    and not p.name.endswith(".tmp"))
    links += [f"<li><a href=\"{esc(n)}\">{esc(n)}</a></li>" for n in others]
    return "<ul>" + "".join(links) + "</ul>"


def render(run_dir: Path, v: dict[str, Any], events: list[Event], twin: list[Event] | None,
           batch_dir: Path | None = None) -> str:
    """The page; plotly's script from batch_dir's shared copy, or inline without a batch (lab/report/plotly_js.py)."""
    passed = bool(v.get("pass", v.get("passed")))
    title = f"{v.get('run_id') or run_dir.name}: {v.get('scenario') or '?'} x {v.get('client') or '-'}"
    info = ", ".join(f"{k} {esc(v.get(k))}" for k in ("topology", "endpoint", "duration", "model") if v.get(k) is not None)
    info = ", ".join(x for x in (info, f"protocol {esc(protocol_of(v))}") if x)
    failed_rules = [n for n, o in (v.get("rules") or {}).items() if o.get("status") == "fail"]
    rep = reproduction_word(v)
    timeline_plot = plot(timeline_figure(events, twin))
    conv_rows, conv_cls = conversation(events, twin)
    net_rows = network(events, twin)
    cap = run_dir / "capture.pcapng"
    filt = story_filter(events)
    capture = (f"<p><a href=\"capture.pcapng\">capture.pcapng</a> (wire, dropped packets, the timeline as frame comments, "
               f"the TLS secrets embedded). The run's story in Wireshark:</p><p><code id=\"story-filter\">{esc(filt)}"
               f"</code></p><p class=\"muted\">wireshark -r capture.pcapng -Y '{esc(filt)}'</p>" if cap.is_file()
               else "<p class=\"muted\">No capture.pcapng in this run folder.</p>")
    body = [
        f"<h1>{esc(title)}</h1>",
        f"<p>{info}</p>" if info else "",
        f"<p><span id=\"verdict\" class=\"verdict {'pass' if passed else 'fail'}\">{'PASS' if passed else 'FAIL'}</span> "
        f"for the user" + (f" &nbsp; <span id=\"reproduction-verdict\" class=\"verdict {'pass' if v.get('reproduces') else 'fail'}\">"
                           f"{esc(rep)}</span>" if rep else "")
        + f" &nbsp; <span id=\"rules-verdict\" class=\"verdict {'fail' if failed_rules else 'pass'}\">"
        f"{len(failed_rules)} rule(s) FAIL</span> {esc(', '.join(failed_rules) or 'every conformance rule passed or was n/a')}</p>",
        "".join(f"<p class=\"muted\">{esc(n)}</p>" for n in v.get("notes") or []),
        _advice(v.get("advice")),
        "<h2 id=\"outcomes\">What the user got</h2>", _outcomes(v), _defaulted(v),
        "<h2 id=\"expectations\">Reproduction rows: the study's figures</h2>", _reproduction_note(v), _expectations(v),
        "<h2 id=\"rules\">Conformance rules: the how-to behind the outcomes</h2>", _rules(v),
        "<h2 id=\"timeline-h\">Timeline</h2><p class=\"muted\">Zoom with a drag, double-click to reset; hover a mark "
        "for the fields of its events.</p>", timeline_plot,
        "<h2 id=\"conversation\">The conversation, the connections and the faults</h2><div class=\"cols\">"
        "<div><h3>The conversation</h3>" + _rows_table(conv_rows, conv_cls, ["time", "who", "what"]) + "</div>"
        "<div><h3>Connections and faults</h3>" + _rows_table(net_rows, [""] * len(net_rows), ["time", "what"]) + "</div></div>",
        "<h2 id=\"figures\">Figures</h2>",
        f"<p class=\"muted\">{TWIN_MARK} a twin input echoed back: against the twin the figure is one of its profile "
        "parameters, so agreeing with the study there is by construction. The others emerged from the run.</p>",
        _figures(v),
        "<h2 id=\"capture\">Capture</h2>", capture,
        "<h2 id=\"files\">Raw files</h2>", _files(run_dir),
    ]
    return shell(title, "\n".join(b for b in body if b), head=plotly_js.tag(run_dir, batch_dir))


def write(run_dir: Path | str, verdict: dict[str, Any], events: list[Event], twin: list[Event] | None,
          batch_dir: Path | str | None = None) -> Path:
    """run_dir/report.html; batch_dir: the batch folder holding the run (its pages share one plotly
    script there), None for a run folder alone (the script inline)."""
    run_dir = Path(run_dir)
    return write_page(run_dir / PAGE, render(run_dir, verdict, events, twin,
                                             None if batch_dir is None else Path(batch_dir)))


def link(from_dir: Path, run_dir: Path) -> str:
    """The relative link from a page in from_dir to a run's report.html."""
    return os.path.relpath(Path(run_dir) / PAGE, from_dir)
