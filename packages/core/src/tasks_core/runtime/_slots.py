"""A worker's slots: starting a run of a claim, and giving its slot back.

At most ``concurrency`` runs hold a slot at once, and per queue at most its limit. A run's
slot ends with its task — or, once the run stopped waiting for its handler, with the task
that finishes the slot (the handler's own task is kept apart: a drain does not wait for
it), or in group mode as soon as its handler is done — while no more than ``commit_batch``
such runs wait for the group commit beyond that; past it a settled run's slot counts as
held until its outcome is written (claims stop). A run that fails unexpectedly stops
its helpers and gives its task back. A claim that cannot start (the worker is shutting
down) is released unstarted, in the background.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import Counter
from collections.abc import Coroutine
from typing import Any

from tasks_core.errors import LeaseLost, TasksError
from tasks_core.models import Claim
from tasks_core.runtime._failures import log_failure
from tasks_core.runtime._host import WorkerHost
from tasks_core.runtime._run import Run
from tasks_core.runtime._run_base import RunBase, RunEnv

__all__ = ["SHORT_RUN", "Slots"]

log = logging.getLogger("tasks_core.worker")

SHORT_RUN = 0.02
"""Seconds a run may hold its slot and still count as short for ``prefetch="auto"``."""


class Slots:
    """The slots of a :class:`~tasks_core.Worker` (its base class)."""

    app: WorkerHost
    worker_id: str
    concurrency: int
    commit_batch: int
    poll_interval: float
    _stopping: bool

    @property
    def stopping(self) -> bool:
        """Whether a shutdown has begun (no more claims)."""
        return self._stopping

    def _init_slots(self) -> None:
        self.runs: dict[str, Run] = {}
        self._run_tasks: dict[asyncio.Task[None], RunBase] = {}
        self._releasing: set[asyncio.Future[Any]] = set()
        self._late: set[asyncio.Future[Any]] = set()
        self._unwritten: list[str] = []
        """Tasks whose outcome (last event or release) the store failed to take."""
        self._active: Counter[str] = Counter()
        self._wake = asyncio.Event()
        """Set when the claim loop may have something to do: a slot freed, a claim in flight
        answered, a held claim dropped, a shutdown began."""
        self._env: RunEnv | None = None
        self.claimed = 0
        self._slots: dict[RunBase, float] = {}
        """Runs holding a slot, each with the loop time it started, oldest first."""
        self._short_run = SHORT_RUN
        self._short_runs = 0
        """Runs in a row (at most ``concurrency``) that held their slot for a short run."""
        self._hold_failed = False
        """A held claim was released unstarted (a delivery spent): no claiming ahead
        until ``concurrency`` short runs in a row have ended."""
        self._awaiting_commit: set[RunBase] = set()
        """Runs whose slot was given back before the group commit wrote their outcome."""

    def _free(self) -> int:
        waiting = len(self._awaiting_commit) - self.commit_batch  # past it: slots held again
        return self.concurrency - sum(self._active.values()) - max(0, waiting)

    def _start(self, claim: Claim, *, held_for: float = 0.0) -> None:
        """Start a run of ``claim`` in a free slot. A claim held for ``poll_interval`` or
        longer is read again first: a cancel from another process may have landed
        meanwhile, before a pushed cancel could reach the worker (its watch sees a new
        held claim at its next wait, within ``poll_interval``)."""
        assert self._env is not None
        self.claimed += 1
        snapshot = claim.snapshot
        if self._stopping:
            self._release(claim, "the worker is shutting down")
            return
        run = Run(self._env, claim, self.app.tasks.get(snapshot.work.name),
                  recheck=held_for >= self.poll_interval)
        self.runs[snapshot.id] = run
        self._slots[run] = asyncio.get_running_loop().time()
        self._active[snapshot.queue] += 1
        # A fresh context: the handler runs in this task (never in the worker's context).
        task = asyncio.get_running_loop().create_task(
            self._in_slot(run, run.execute()), name=f"tasks:run:{snapshot.id}",
            context=contextvars.Context(),
        )
        run.runner = task
        self._run_tasks[task] = run

    async def _in_slot(self, run: RunBase, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` for ``run``'s slot; the slot ends with it."""
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug in the run's own machinery: never a lease kept renewed
            log.exception("task %r: the run failed unexpectedly; giving its task back",
                          run.task_id)
            await run.give_back()
        finally:
            self._free_slot(run)
            self._awaiting_commit.discard(run)
            if self.runs.get(run.task_id) is run:
                del self.runs[run.task_id]
            current = asyncio.current_task()
            if current is not None:
                self._run_tasks.pop(current, None)
            self._wake.set()

    def _finish_early(self, run: RunBase, rest: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """``run`` stopped waiting for its handler: the rest of its slot runs in a task of
        its own, and the run's task, still waiting for the handler, is kept apart (a
        drain does not wait for it)."""
        late = run.runner
        if late is not None and self._run_tasks.pop(late, None) is not None:
            self._late.add(late)
            late.add_done_callback(self._late.discard)
        task = asyncio.get_running_loop().create_task(
            self._in_slot(run, rest), name=f"tasks:run-stopped:{run.task_id}",
            context=contextvars.Context(),
        )
        self._run_tasks[task] = run
        return task

    def _settle_slot(self, run: RunBase) -> None:
        """Group mode: give ``run``'s slot back once its handler is done; its outcome waits
        for the group commit (counted: see :meth:`_free`)."""
        if run in self._slots:
            self._awaiting_commit.add(run)
        self._free_slot(run)

    def _free_slot(self, run: RunBase) -> None:
        """Give ``run``'s slot back (once): when its run ends, or in group mode as soon as
        its handler is done."""
        started = self._slots.pop(run, None)
        if started is None:
            return
        self._active[run.snapshot.queue] -= 1
        short = asyncio.get_running_loop().time() - started <= self._short_run
        self._short_runs = min(self._short_runs + 1, self.concurrency) if short else 0
        if self._short_runs == self.concurrency:  # runs short again: held claims start
            self._hold_failed = False
        self._wake.set()

    def _handlers_busy(self) -> int:
        """Runs of this worker whose handler has not finished (the group commit waits for
        them, briefly)."""
        return sum(1 for run in self.runs.values() if not run.settling)

    def _release(self, claim: Claim, why: str) -> None:
        """Give ``claim`` back unstarted, in the background (a shutdown waits for it)."""
        release = asyncio.ensure_future(self._release_unstarted(claim, why))
        self._releasing.add(release)
        release.add_done_callback(self._releasing.discard)

    async def _release_unstarted(self, claim: Claim, why: str) -> None:
        try:
            assert self._env is not None
            await self._env.store.release(claim.lease)
        except LeaseLost:
            return
        except TasksError:
            log_failure(log, "task %r: could not release an unstarted claim", claim.snapshot.id)
            self._unwritten.append(claim.snapshot.id)
            return
        log.debug("task %r: released unstarted (%s)", claim.snapshot.id, why)
        if self._env.tally is not None:
            self._env.tally.count("released")
        self.app.notices.work.notify()
        self.app.notices.changes.notify()

