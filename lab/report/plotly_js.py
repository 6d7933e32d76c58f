"""plotly's own script for a run's report.html: one file per batch, inline for a run folder alone.

    tag(page_dir, batch_dir)   -> the <script> element a page in page_dir loads plotly with
    share(batch_dir)           -> batch_dir/plotly.min.js, written when missing or of another version

The script is the one the `plotly` package ships (package_data/plotly.min.js), so a page needs
nothing from the network. It is most of a page's weight, so every run page of a batch loads the
batch's one copy (beside summary.md) by a path relative to the page, which still opens from disk
(file://) as long as the batch folder is kept whole; a run folder reported alone (no batch) carries
the script inline, as a page that must survive being copied on its own.
"""
from __future__ import annotations

import functools
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from lab.report.page import esc

SCRIPT = "plotly.min.js"
HEADER_BYTES = 64      # plotly.js opens with its version ("/**\n* plotly.js v4.1.1"): enough to tell two apart


def _source() -> Path:
    p = Path(str(resources.files("plotly") / "package_data" / SCRIPT))
    if not p.is_file():
        raise FileNotFoundError(f"the plotly package ships no {SCRIPT} ({p})")
    return p


@functools.lru_cache(maxsize=1)
def _inline_text() -> str:
    # "</script" cannot occur in a script element's text; plotly.js holds none, and the guard keeps it so
    return _source().read_text(encoding="utf-8").replace("</script", "<\\/script")


def _same(a: Path, b: Path) -> bool:
    """The same plotly.js: the same size and the same opening (its version line)."""
    try:
        if a.stat().st_size != b.stat().st_size:
            return False
        with a.open("rb") as fa, b.open("rb") as fb:
            return fa.read(HEADER_BYTES) == fb.read(HEADER_BYTES)
    except OSError:
        return False


def share(batch_dir: Path | str) -> Path:
    """batch_dir/plotly.min.js, copied from the package unless this version is already there.
    Atomic (a unique temporary name, then a rename), so runs of one batch reporting at once and a
    reader opening a page meanwhile never see half a script."""
    dest = Path(batch_dir) / SCRIPT
    src = _source()
    if _same(src, dest):
        return dest
    fd, tmp = tempfile.mkstemp(prefix=f".{SCRIPT}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def tag(page_dir: Path | str, batch_dir: Path | str | None) -> str:
    """The <script> that loads plotly for a page in page_dir: the batch's shared file (written now
    if needed) by its relative path, or, without a batch, the script itself inline."""
    if batch_dir is None:
        return f"<script type=\"text/javascript\">{_inline_text()}</script>"
    rel = Path(os.path.relpath(share(batch_dir), page_dir)).as_posix()
    return f"<script src=\"{esc(rel)}\" charset=\"utf-8\"></script>"
