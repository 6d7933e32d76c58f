"""The live session budget: every connection a client opens is one session, charged before it opens.

Each connection (the first, each resume attempt, each new session) is one WebSocket setup against
the real endpoint, and each costs quota. The client calls `ClientContext.before_connect(purpose)`
before it opens any connection (docs/DESIGN.md); in live mode that callable is a
`ConnectionCharger`, which reserves one session in three ledgers at once, the run's, the batch's
and the day's, or raises `lab.errors.BudgetError` (one line) when a cap would be passed, so the
connection is never opened. The ledgers are JSON files updated under an exclusive lock and
replaced atomically, so the orchestrator and the agent (another process, in the client's
namespace) share them:

- the batch ledger, `<batch>/budget.json`: `caps`, `day_path`, sessions per run (`runs`), `total`;
- the day ledger, `~/.local/state/livelab/sessions-YYYY-MM-DD.json` (or $LAB_BUDGET_DAY_FILE),
  shared by every batch of that day: `total`, and the count per batch.

The orchestrator (`lab run`, `lab soak`):

    budget = Budget.for_batch(args.budget)      # caps from the environment; --budget wins
    budget.attach(batch_dir)                    # the batch ledger's file (kept if it has one)
    ledger = budget.start_run(run_id)           # BudgetError when a cap is already spent
    ... the agent gets `ledger` and `run_id` ...
    budget.settle(run_dir)                      # cross-check: conn.open records against charges

The agent: `ctx.before_connect = ConnectionCharger.from_ledger(ledger, run_id)`.

Caps from the environment (`Budget.from_env`): LAB_BUDGET (sessions per batch, default 200),
LAB_BUDGET_RUN (per run, default 120), LAB_BUDGET_DAY (per day, default 1000).
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from lab.errors import BudgetError, LabError
from lab.events import read_events

DEFAULT_RUN, DEFAULT_BATCH, DEFAULT_DAY = 120, 200, 1000


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


@dataclass(frozen=True)
class Settlement:
    """A run's sessions after the fact: charged before each connection, and opened (conn.open)."""
    run: str
    charged: int
    opened: int

    @property
    def note(self) -> str:
        """One line when connections opened without a charge (a client not calling before_connect)."""
        if self.opened <= self.charged:
            return ""
        return (f"run {self.run}: {self.opened - self.charged} connection(s) opened without a charge "
                f"(the client does not call before_connect); counted now")


class Budget:
    def __init__(self, cap_run: int | None, cap_batch: int | None, path: Path | str | None,
                 day_path: Path | str | None = None, cap_day: int | None = None, run_id: str = "run"):
        self.cap_run, self.cap_batch, self.cap_day = cap_run, cap_batch, cap_day
        self.path = Path(path) if path is not None else None
        self.day_path = Path(day_path) if day_path is not None else default_day_path()
        self.run_id = run_id

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

    @classmethod
    def for_batch(cls, cap_batch: int | None = None, batch_dir: Path | str | None = None,
                  env: Mapping[str, str] | None = None) -> "Budget":
        """The orchestrator's budget: caps from the environment, `cap_batch` (e.g. --budget) wins."""
        b = cls.from_env(batch_dir or ".", env)
        if batch_dir is None:
            b.path = None           # the batch folder does not exist yet: attach() gives it
        if cap_batch is not None:
            b.cap_batch = cap_batch
        return b

    def attach(self, batch_dir: Path | str) -> "Budget":
        """Keep the batch ledger as batch_dir/budget.json, unless it already has a file (a soak's)."""
        if self.path is None:
            self.path = Path(batch_dir) / "budget.json"
        return self

    def _ledger_path(self) -> Path:
        if self.path is None:
            raise LabError("the session budget has no ledger file yet (attach it to the batch folder first)")
        return self.path

    @contextmanager
    def _ledgers(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        with _locked(self._ledger_path()) as batch, _locked(self.day_path) as day:
            yield batch, day

    def _spent(self, batch: dict[str, Any], day: dict[str, Any], run: str, n: int) -> str | None:
        """The one line refusing n more sessions, or None when every cap allows them."""
        for used, cap, what in ((batch.get("runs", {}).get(run, 0), self.cap_run, f"run {run}"),
                                (batch.get("total", 0), self.cap_batch, "this batch"),
                                (day.get("total", 0), self.cap_day, "today")):
            if cap is not None and used + n > cap:
                return f"session budget for {what} is spent ({used} of {cap} opened)"
        return None

    def start_run(self, run_id: str) -> Path:
        """Charge the following sessions to `run_id`; the ledger path for the run's agent.

        Records the caps and the day ledger in the batch ledger (the agent reads them there) and
        raises BudgetError, before anything starts, when not even one session is left.
        """
        self.run_id = run_id
        with self._ledgers() as (batch, day):
            why = self._spent(batch, day, run_id, 1)
            if why:
                raise BudgetError(f"{why}; run {run_id} was not started")
            batch["caps"] = {"run": self.cap_run, "batch": self.cap_batch, "day": self.cap_day}
            batch["day_path"] = str(self.day_path.resolve())
            batch.setdefault("runs", {}).setdefault(run_id, 0)
        return self._ledger_path()

    def charge(self, n: int = 1, run_id: str | None = None, purpose: str = "live") -> dict[str, int]:
        """Count n sessions about to open; BudgetError (nothing counted) if a cap would be passed."""
        run = run_id or self.run_id
        with self._ledgers() as (batch, day):
            why = self._spent(batch, day, run, n)
            if why:
                raise BudgetError(f"{why}; the {purpose} connection was not opened")
            runs = batch.setdefault("runs", {})
            runs[run] = runs.get(run, 0) + n
            batch["total"] = batch.get("total", 0) + n
            day["total"] = day.get("total", 0) + n
            day.setdefault("batches", {})[str(self._ledger_path().parent.resolve())] = batch["total"]
            return {"run": runs[run], "batch": batch["total"], "day": day["total"]}

    def settle(self, run_dir: Path | str, run_id: str | None = None) -> Settlement:
        """Cross-check a finished run: connections its record shows opened against those charged.

        A connection opened without a charge is counted now (it cannot be refused any more); a
        charge whose connection never opened stays counted (it may have reached the endpoint).
        """
        p = Path(run_dir) / "events.jsonl"
        opened = sum(1 for e in read_events(p) if e.kind == "conn.open") if p.is_file() else 0
        run = run_id or self.run_id
        with self._ledgers() as (batch, day):
            runs = batch.setdefault("runs", {})
            charged = runs.get(run, 0)
            extra = max(0, opened - charged)
            runs[run] = charged + extra
            batch["total"] = batch.get("total", 0) + extra
            day["total"] = day.get("total", 0) + extra
        return Settlement(run, charged, opened)


class ConnectionCharger:
    """`ClientContext.before_connect` for live runs: one session reserved before each connection."""

    def __init__(self, budget: Budget, run_id: str):
        self.budget, self.run_id = budget, run_id

    @classmethod
    def from_ledger(cls, path: Path | str, run_id: str) -> "ConnectionCharger":
        """The agent's charger: caps and day ledger as the orchestrator wrote them in `path`."""
        path = Path(path)
        try:
            led = json.loads(path.read_text())
            caps, day_path = led["caps"], led["day_path"]
        except (OSError, ValueError, KeyError, TypeError):
            raise LabError(f"budget ledger {path} has no caps (the orchestrator's start_run writes them)") from None
        return cls(Budget(caps.get("run"), caps.get("batch"), path, day_path=day_path, cap_day=caps.get("day"),
                          run_id=run_id), run_id)

    def __call__(self, purpose: str) -> None:
        self.budget.charge(1, self.run_id, purpose)
