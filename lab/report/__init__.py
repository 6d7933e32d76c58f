"""The report room: verdicts, timelines and summaries, a pure function of result folders.

`build_run(run_dir)` writes verdict.json and timeline.png for one run; `summarize(batch_dir)`
writes summary.md over a batch. Imported lazily so `import lab.report` does not load matplotlib.
"""
from __future__ import annotations

from typing import Any

__all__ = ["build_run", "summarize"]


def __getattr__(name: str) -> Any:
    # the imports below are lazy on purpose (see the docstring): matplotlib only when asked
    if name == "build_run":
        from lab.report.verdict import build_run
        return build_run
    if name == "summarize":
        from lab.report.summary import summarize   # lazy, as above
        return summarize
    raise AttributeError(name)
