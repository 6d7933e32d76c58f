"""`lab bench report` on a recorded run: it prints every case, the page's sizes and a batch's weight,
leaves the run folder as it was, and refuses a folder that is not a run's (no timing is asserted)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lab.bench import pages
from lab.errors import LabError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "report-matrix" / "control-naive-01"


def test_it_prints_each_case_and_what_a_batch_of_pages_weighs(tmp_path, capsys):
    run = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, run)
    before = sorted(p.name for p in run.iterdir())
    assert pages.main([str(run), "-n", "1", "--cold", "0", "--runs", "10"]) == 0
    out = capsys.readouterr().out
    for case in pages.CASES:
        assert f"\n{case:>18} " in out
    assert "page adds" in out and "page alone adds" in out and "the page by itself" in out
    sizes = {line.split(":")[0]: int(line.split(":")[1].split()[0].replace(",", ""))
             for line in out.splitlines() if line.startswith("report.html, ")}
    assert sizes["report.html, page alone"] > 1_000_000 > 200_000 > sizes["report.html, page"]
    assert "a batch of 10 runs:" in out
    assert sorted(p.name for p in run.iterdir()) == before       # the folder measured is left as it was


def test_a_folder_that_is_not_a_run_is_one_clear_error(tmp_path):
    with pytest.raises(LabError, match="not a run folder"):
        pages.main([str(tmp_path)])
