"""timeline.png's layout: the twin's marks on the run's clock, and a legend entry for every mark."""
from lab.events import Event
from lab.report import timeline

T0 = 1_700_000_000.0    # the run's start on the wall clock


def ev(kind, ms, src="client", **data):
    return Event(kind=kind, t=T0 + ms / 1000.0, ms=ms, src=src, data=data)


def twin_ev(kind, t_ms, ms, **data):
    """A twin event at wall time T0 + t_ms whose own `ms` field says `ms`."""
    return Event(kind=kind, t=T0 + t_ms / 1000.0, ms=ms, src="twin", data=data)


def record():
    return [
        ev("run.start", 0, src="agent"),
        ev("conn.open", 100, conn=1, purpose="initial"),
        ev("conn.setup_complete", 400, conn=1),
        ev("user.say", 900, text="book a table", line=0),
        ev("tool.call", 1500, id="c1"),
        ev("fault.apply", 2000, src="agent", name="cut", spec={"kind": "blackhole"}),
        ev("loss", 2000, src="agent", how="fault"),
        ev("loss.detected", 5000, how="timeout"),
        ev("conn.closed", 5000, conn=1, code=1006),
        ev("resume.attempt", 5100, attempt=1),
        ev("conn.open", 5100, conn=2, purpose="resume"),
        ev("resume.result", 5300, attempt=1, ok=False, code=1011),
        ev("conn.closed", 5300, conn=2, code=1011),
        ev("fault.clear", 8000, src="agent", name="cut"),
        ev("user.heard", 9000, start_ms=9000, end_ms=9800),
        ev("model.audio", 9000, first=True),
        ev("model.text", 9500, text="Your table is booked."),
        ev("action", 9900, src="agent", what="close"),
        ev("run.end", 10000, src="agent", status="ok"),
    ]


def x_of(marks, style):
    return [m.x for m in marks if m.style == style]


def test_the_twin_refusal_after_the_detection_is_drawn_after_it():
    twin = [twin_ev("twin.refuse", 5200, ms=5200, conn=2, code=1011)]
    marks = timeline.layout(record(), twin)
    (detected,), (refused,) = x_of(marks, "detected"), x_of(marks, "twin.refuse")
    assert detected == 5.0 and abs(refused - 5.2) < 1e-6 and refused > detected


def test_twin_marks_go_by_wall_time_even_when_its_ms_counted_from_its_own_start():
    # a twin.jsonl written before --t0: ms counts from the twin's start, 0.4 s after the run's
    twin = [twin_ev("twin.refuse", 5200, ms=4800, conn=2, code=1011),
            twin_ev("twin.accept", 400, ms=0.0, conn=1)]
    marks = timeline.layout(record(), twin)
    assert abs(x_of(marks, "twin.refuse")[0] - 5.2) < 1e-6 and abs(x_of(marks, "twin.accept")[0] - 0.4) < 1e-6


def test_every_mark_drawn_is_in_the_legend():
    twin = [twin_ev("twin.refuse", 5200, ms=5200), twin_ev("twin.accept", 400, ms=400),
            twin_ev("twin.freeze_close", 7000, ms=7000), twin_ev("twin.goaway", 7500, ms=7500)]
    marks = timeline.layout(record(), twin)
    fig = timeline.draw(marks, end_s=10.0)
    try:
        legend = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    finally:
        timeline.plt.close(fig)
    drawn = {m.style for m in marks if timeline.STYLES[m.style].draw != "label"}
    assert {timeline.STYLES[k].label for k in drawn} == legend
    # what the user heard, the twin's own marks, the fault, the loss and its detection are all named
    for key in ("user.heard", "user.say", "twin.refuse", "twin.accept", "twin.freeze_close", "twin.goaway",
                "fault", "loss", "detected", "action", "conn.initial", "conn.resume", "resume.refused"):
        assert key in drawn, key


def test_render_writes_a_png_with_and_without_events(tmp_path):
    assert timeline.render(record(), tmp_path / "a.png").stat().st_size > 10_000
    assert timeline.render([], tmp_path / "b.png").stat().st_size > 1_000
