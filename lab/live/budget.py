"""A session ledger for live mode: every session opened against the real endpoint is counted.

Each resume attempt and each new session is one session opened (one WebSocket setup), and each
costs quota. `Budget(cap_run, cap_batch, path)` keeps a JSON ledger at `path` (the batch's
`budget.json`) with the count per run and for the batch, plus a global per-day ledger
(`day_path`, default `~/.local/state/livelab/sessions-YYYY-MM-DD.json`, or $LAB_BUDGET_DAY_FILE)
shared by every batch of that day. `charge(n)` adds n sessions to the current run, or raises
`BudgetExceeded` (a LabError, one line) *before* counting when a cap would be passed, so the
caller opens nothing. Both files are updated under an exclusive lock and replaced atomically,
so the agent process and the orchestrator can charge the same ledger.

The orchestrator uses `Budget.for_batch(cap)` and, before each run, `charge_run(scenario, client)`,
which reserves the run's upper-bound session count (`estimate_sessions`: the initial session, every
resume attempt its schedule allows, a fallback); `settle(run_dir)` afterwards replaces the
reservation with the sessions the record shows (`conn.open` events). `attach(batch_dir)` moves the
batch ledger into `batch_dir/budget.json` once the folder exists.

Caps from the environment (`Budget.from_env`): LAB_BUDGET (sessions per batch, default 200),
LAB_BUDGET_RUN (per run, default 120), LAB_BUDGET_DAY (per day, default 1000).
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from lab.errors import LabError

DEFAULT_RUN, DEFAULT_BATCH, DEFAULT_DAY = 120, 200, 1000


class BudgetExceeded(LabError):
    """Opening another session would pass a cap; nothing was opened."""
    code = 4


def default_day_path(day: _dt.date | None = None, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("LAB_BUDGET_DAY_FILE"):
        return Path(env["LAB_BUDGET_DAY_FILE"])
    base = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "livelab"
    return base / f"sessions-{(day or _dt.date.today()).isoformat()}.json"


@contextmanager
def _locked(path: Path) -> Iterator[dict[str, Any]]:
    """Read-modify-write a JSON ledger under an exclusive lock; written back on exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            data = json.loads(path.read_text()) if path.is_file() and path.stat().st_size else {}
        except (json.JSONDecodeError, OSError):
            raise LabError(f"budget ledger {path} is unreadable; fix or remove it") from None
        yield data
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)


def estimate_sessions(scenario: Any, client: str) -> int:
    """An upper bound of the sessions one run of `scenario` with `client` opens.

    One initial session, every resume attempt the client's schedule allows within its resume time
    (or the whole run), one quick retry, and one new session for a client that falls back.
    """
    params = scenario.params_for(client) if hasattr(scenario, "params_for") else dict(getattr(scenario, "params", {}) or {})
    duration = float(getattr(scenario, "duration", 0) or 0)
    every = params.get("resume_every_s") or params.get("resume_interval_s") or (10.0 if client == "probe" else 1.0)
    window = params.get("resume_for_s") or params.get("resume_window_s")
    if window is None:
        window = 2.0 if client == "recovery" else (60.0 if client == "naive" else duration)
    attempts = int(min(float(window), duration or float(window)) // float(every)) + 2
    return 1 + attempts + (1 if client == "recovery" else 0)


class Budget:
    def __init__(self, cap_run: int | None, cap_batch: int | None, path: Path | str | None,
                 day_path: Path | str | None = None, cap_day: int | None = None, run_id: str = "run"):
        self.cap_run, self.cap_batch, self.cap_day = cap_run, cap_batch, cap_day
        self.path = Path(path) if path is not None else None
        self.day_path = Path(day_path) if day_path is not None else default_day_path()
        self.run_id = run_id
        self._mem: dict[str, Any] = {}   # the batch ledger until attach() gives it a folder
        self._runs = 0

    @classmethod
    def for_batch(cls, cap_batch: int | None = None, batch_dir: Path | str | None = None,
                  env: Mapping[str, str] | None = None) -> "Budget":
        """The orchestrator's budget: caps from the environment, `cap_batch` (e.g. --budget) wins."""
        b = cls.from_env(batch_dir or ".", env)
        if batch_dir is None:
            b.path = None
        if cap_batch is not None:
            b.cap_batch = cap_batch
        return b

    def attach(self, batch_dir: Path | str) -> "Budget":
        """Keep the batch ledger as batch_dir/budget.json from now on (carrying what was counted)."""
        self.path = Path(batch_dir) / "budget.json"
        if self._mem:
            with _locked(self.path) as data:
                data.update(self._mem)
            self._mem = {}
        return self

    def charge_run(self, scenario: Any, client: str) -> dict[str, int]:
        """Start the next run of `scenario` and reserve its upper-bound session count."""
        self._runs += 1
        name = getattr(scenario, "name", str(scenario))
        self.start_run(f"{name}-{client}-{self._runs:02d}")
        return self.charge(estimate_sessions(scenario, client))

    def settle(self, run_dir: Path | str, run_id: str | None = None) -> int:
        """Replace the current run's reservation with the sessions its record shows (conn.open)."""
        from lab.events import read_events
        p = Path(run_dir) / "events.jsonl"
        actual = sum(1 for e in read_events(p) if e.kind == "conn.open") if p.is_file() else 0
        run = run_id or self.run_id
        with self._batch() as batch, _locked(self.day_path) as day:
            reserved = batch.setdefault("runs", {}).get(run, 0)
            delta = actual - reserved
            batch["runs"][run] = actual
            batch["total"] = batch.get("total", 0) + delta
            day["total"] = day.get("total", 0) + delta
        return actual

    @contextmanager
    def _batch(self) -> Iterator[dict[str, Any]]:
        if self.path is None:
            yield self._mem
        else:
            with _locked(self.path) as data:
                yield data

    @classmethod
    def from_env(cls, batch_dir: Path | str, env: Mapping[str, str] | None = None) -> "Budget":
        env = os.environ if env is None else env

        def num(name: str, default: int) -> int:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                return int(raw)
            except ValueError:
                raise LabError(f"{name}={raw!r} is not a whole number of sessions") from None

        return cls(num("LAB_BUDGET_RUN", DEFAULT_RUN), num("LAB_BUDGET", DEFAULT_BATCH), Path(batch_dir) / "budget.json",
                   day_path=default_day_path(env=env), cap_day=num("LAB_BUDGET_DAY", DEFAULT_DAY))

    def start_run(self, run_id: str) -> "Budget":
        """Charge the following sessions to `run_id` (its own per-run cap)."""
        self.run_id = run_id
        return self

    def charge(self, n: int = 1, run_id: str | None = None) -> dict[str, int]:
        """Count n sessions opened; BudgetExceeded (nothing counted) if a cap would be passed."""
        run = run_id or self.run_id
        with self._batch() as batch, _locked(self.day_path) as day:
            runs = batch.setdefault("runs", {})
            r, b, d = runs.get(run, 0) + n, batch.get("total", 0) + n, day.get("total", 0) + n
            for used, cap, what in ((r, self.cap_run, f"run {run}"), (b, self.cap_batch, "this batch"),
                                    (d, self.cap_day, "today")):
                if cap is not None and used > cap:
                    raise BudgetExceeded(f"session budget for {what} is spent ({used - n} of {cap} opened); "
                                         "no further live session was opened")
            runs[run], batch["total"], day["total"] = r, b, d
            batch.setdefault("caps", {}).update({"run": self.cap_run, "batch": self.cap_batch, "day": self.cap_day})
            day.setdefault("batches", {})[str(self.path.parent) if self.path else f"pid-{os.getpid()}"] = b
        return {"run": r, "batch": b, "day": d}

    def used(self) -> dict[str, Any]:
        """The ledger as it stands (no lock needed to read a replaced-atomically file)."""
        def read(p: Path) -> dict[str, Any]:
            try:
                return json.loads(p.read_text()) if p.is_file() else {}
            except (json.JSONDecodeError, OSError):
                return {}
        b, d = (read(self.path) if self.path else self._mem), read(self.day_path)
        return {"runs": b.get("runs", {}), "batch": b.get("total", 0), "day": d.get("total", 0)}
