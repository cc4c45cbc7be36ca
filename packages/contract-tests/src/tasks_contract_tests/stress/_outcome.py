"""One workload's or scenario's result, and the bounded frame every one of them runs in."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks_core import TasksError

from tasks_contract_tests.stress._invariants import Check
from tasks_contract_tests.stress._procs import Fleet
from tasks_contract_tests.stress._target import HarnessError, Target, fresh_target, store_family

__all__ = ["TRIED", "Body", "Outcome", "bounded"]

TRIED = ("processes", "tasks", "kills", "stops", "restarts", "connections_cut", "bad_inputs")
"""What the report's table says was tried, per workload."""
HEADLINE = ("lost", "doubled", "overwritten")


@dataclass
class Outcome:
    """What one workload or scenario did and whether every invariant held.

    Attributes:
        name: the workload or scenario.
        store: the store family (``sqlite``, ``postgresql``…).
        params: its sizes.
        checks: the exact invariants.
        figures: counts of what happened (not invariants).
        tried: the faults and load (see :data:`TRIED`).
        error: why the harness could not finish (the run then fails).
        skipped: why the scenario does not apply to this store.
        notes: what a reader of the report should know (a fault that could not be made).
    """

    name: str
    store: str
    params: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    figures: dict[str, int] = field(default_factory=dict)
    tried: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every invariant held and the harness finished (a skip is ok)."""
        if self.skipped is not None:
            return True
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)

    def headline(self, name: str) -> int | None:
        """The ``actual`` of the check ``name`` (``lost``, ``doubled``, ``overwritten``)."""
        for check in self.checks:
            if check.name == name:
                return check.actual
        return None

    def as_dict(self) -> dict[str, Any]:
        """JSON form for the report."""
        return {
            "name": self.name,
            "store": self.store,
            "ok": self.ok,
            "skipped": self.skipped,
            "error": self.error,
            "seconds": round(self.seconds, 1),
            "params": self.params,
            "notes": self.notes,
            "tried": {k: self.tried.get(k, 0) for k in TRIED},
            **{k: self.headline(k) for k in HEADLINE},
            "figures": self.figures,
            "checks": [c.as_dict() for c in self.checks],
        }


Body = Callable[[Target, Fleet, Outcome], Awaitable[None]]


async def bounded(
    name: str,
    url: str,
    directory: Path,
    body: Body,
    *,
    timeout: float,
    params: dict[str, Any] | None = None,
    keep: bool = False,
) -> Outcome:
    """Run ``body`` in a fresh namespace with a fleet of its own, within ``timeout``.

    Whatever happens, every process is reaped and the namespace dropped (unless ``keep``);
    a bound exceeded or a harness failure becomes :attr:`Outcome.error`.
    """
    outcome = Outcome(name=name, store=store_family(url), params=dict(params or {}))
    started = time.monotonic()
    target: Target | None = None
    try:
        target = await fresh_target(url)
        fleet = Fleet(directory / name, target)
        try:
            async with asyncio.timeout(timeout), fleet:
                await body(target, fleet, outcome)
        finally:
            outcome.tried["processes"] = fleet.processes
            outcome.tried["kills"] = fleet.signals["SIGKILL"]
            outcome.tried["stops"] = fleet.signals["SIGSTOP"]
    except TimeoutError:
        outcome.error = f"not finished within {timeout:g}s (bounded run stopped)"
    except (HarnessError, TasksError, OSError) as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
    finally:
        if target is not None and not keep:
            with contextlib.suppress(Exception):
                await target.drop()
        outcome.seconds = time.monotonic() - started
    return outcome
