"""One scenario end to end through Docker Compose: the lab's main job in containers.

B1 (shortened) with the probe client: the client container's own kernel drops its connection's
packets, the twin in the endpoint container holds the session, and every resume is refused with
1011 while the booking commits. The run's folder must hold the same record as a namespace run:
events, the twin's log, the merged pcapng with the dropped packets, the verdict and the timeline.
"""
import json

import pytest

from lab.events import read_events

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_b1_through_compose(tmp_path):
    from lab.run import run_batch

    lines: list[str] = []
    batch = run_batch(["b1-silent-loss"], topology="compose", duration=25, out_dir=tmp_path / "batch",
                      out=lines.append)
    run = next(d for d in batch.iterdir() if d.is_dir())
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["pass"], (verdict["expectations"], lines[-25:])
    evs = read_events(run / "events.jsonl")
    results = [e for e in evs if e.kind == "resume.result"]
    assert results and all(e["code"] == 1011 for e in results)
    assert (run / "twin.jsonl").exists() and (run / "timeline.png").exists()

    from lab.capture import dropped
    assert dropped(run / "capture.pcapng"), "the dropped packets are in the capture"
