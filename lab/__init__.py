"""livelab: a network fault-injection lab for realtime Live API clients."""
__version__ = "0.1.0"

import os as _os

# the twin's hot rooms from their mypyc build instead of their .py files (lab.twin.compiled): read
# here, before any of them can be imported, so a process and its children take it from the environment
if _os.environ.get("LAB_TWIN_COMPILED", "") not in ("", "0"):
    from lab.twin import compiled as _compiled
    try:
        _compiled.use()
    except _compiled.BuildMissing as _e:
        raise SystemExit(f"lab: {_compiled.SWITCH} is set, but {_e}") from None
