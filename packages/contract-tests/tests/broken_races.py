"""Broken stores that check before they act: each makes its decision under the store
lock, yields to the event loop (``await asyncio.sleep(0)``: the window a database round
trip opens), then writes without deciding again. Called one at a time they are correct;
only a race catches them (``test_self.py`` names the race test for each).
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any

from tasks_core import Access, Claim, Event, Lease, Snapshot, Transition, rules, storekit
from tasks_store_memory import MemoryStore
from tasks_store_memory._rows import ClaimLog

__all__ = [
    "ClaimNextChecksBeforeClaiming",
    "ExclusiveQueueCheckedBeforeClaiming",
    "QueueLimitsCheckedBeforeClaiming",
    "RevisionCheckedBeforeWriting",
]

_acting: ContextVar[bool] = ContextVar("acting", default=False)
"""Set while a store acts on what it checked earlier (per task and thread)."""


@contextmanager
def _without_checking() -> Iterator[None]:
    token = _acting.set(True)
    try:
        yield
    finally:
        _acting.reset(token)


class ExclusiveQueueCheckedBeforeClaiming(MemoryStore):
    """Finds which exclusive queues are busy, yields, then claims without looking again:
    racing workers all find the queue idle, and each leaves with one of its tasks."""

    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
        start: int | None = None,
        limits: Mapping[str, storekit.QueueLimits] | None = None,
    ) -> builtins.list[Claim]:
        if limits:  # not this store's defect
            return await super().claim_next(worker_id, lease_for, queues=queues, limit=limit,
                                             exclusive=exclusive, start=start, limits=limits)
        wanted = rules.check_queues(queues)
        exclusive_set = rules.check_queues(exclusive, allow_empty=True)
        with self._locked() as now:
            busy = {queue for queue in exclusive_set & wanted if self._queue_running(queue, now)}
        await asyncio.sleep(0)  # the window: another worker claims from the queue here
        free = [queue for queue in queues if queue not in busy]
        if not free:
            return []
        with _without_checking():
            return await super().claim_next(worker_id, lease_for, queues=free, limit=limit,
                                            exclusive=exclusive, start=start)

    def _queue_running(self, queue: str, now: datetime) -> int:
        return 0 if _acting.get() else super()._queue_running(queue, now)


class _UncheckedLog(ClaimLog):
    """A claim log whose counts read nothing while the store acts."""

    def count(self, queue: str, window: timedelta, now: datetime) -> int:
        return 0 if _acting.get() else super().count(queue, window, now)


class QueueLimitsCheckedBeforeClaiming(MemoryStore):
    """Counts a limited queue's live leases and recent claims, yields, then claims up to
    the room it found without counting again: racing workers each take the whole room."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._claim_log = _UncheckedLog()

    def _queue_running(self, queue: str, now: datetime) -> int:
        return 0 if _acting.get() else super()._queue_running(queue, now)

    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
        start: int | None = None,
        limits: Mapping[str, storekit.QueueLimits] | None = None,
    ) -> builtins.list[Claim]:
        request = storekit.check_claim_next(worker_id, lease_for, queues, limit, exclusive,
                                            start, limits)
        with self._locked() as now:
            running = {q: self._queue_running(q, now) for q in request.limited}
            recent = {q: self._claim_log.count(q, bounds.window, now)
                      for q, bounds in request.limits.items() if bounds.window}
            room = storekit.ClaimScan(request, now, running=running, recent=recent)
            allowed = min([room.room(q) for q in request.limited] or [limit])
        await asyncio.sleep(0)  # the window: another worker claims from the queue here
        if allowed <= 0:
            return []
        with _without_checking():
            return await super().claim_next(worker_id, lease_for, queues=queues,
                                             limit=allowed, exclusive=exclusive,
                                             start=start, limits=limits)


class ClaimNextChecksBeforeClaiming(MemoryStore):
    """Reads the oldest claimable tasks, yields, then leases them without reading their
    state again: racing workers lease the same tasks."""

    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
        start: int | None = None,
        limits: Mapping[str, storekit.QueueLimits] | None = None,
    ) -> builtins.list[Claim]:
        if exclusive or start is not None or limits:  # not this store's defect
            return await super().claim_next(worker_id, lease_for, queues=queues, limit=limit,
                                             exclusive=exclusive, start=start, limits=limits)
        rules.check_lease_for(lease_for)
        rules.check_worker_id(worker_id)
        wanted = rules.check_queues(queues)
        rules.check_limit(limit, maximum=rules.MAX_BATCH)
        with self._locked() as now:
            candidates = []
            for task_id, row in self._rows.items():
                try:
                    snapshot = self._take(task_id, row)
                except Exception:
                    continue
                if snapshot.queue in wanted and self._claimable(snapshot, now):
                    candidates.append(snapshot)
        candidates.sort(key=storekit.claim_order)
        chosen: list[str] = []
        served = 0
        for snapshot in candidates:
            if served >= limit:
                break
            chosen.append(snapshot.id)  # past its delivery limit: failed, not served
            served += snapshot.deliveries < snapshot.work.max_deliveries
        await asyncio.sleep(0)  # the window: another worker leases the same tasks here
        claims: list[Claim] = []
        with self._locked() as now:
            for task_id in chosen:
                row = self._rows.get(task_id)
                if row is None:
                    continue
                started = storekit.started(self._take(task_id, row), worker_id, lease_for,
                                           now)
                self._write(row, started)
                if started.claim is not None:
                    claims.append(started.claim)
        return claims


class RevisionCheckedBeforeWriting(MemoryStore):
    """Decides the transition (authority, replay, revision), yields, then writes with the
    revision check skipped: racing writers at one revision all win."""

    async def transition(
        self, task_id: str, expected_revision: int, event: Event, authority: Lease | Access
    ) -> Transition:
        if isinstance(authority, (Lease, Access)):
            with self._locked() as now:
                row = self._row(task_id)
                position = self._find_event(row, event.event_id)
                rules.decide_transition(
                    self._take(task_id, row), row.token,
                    None if position is None
                    else lambda: self._record(row.history[position]),
                    expected_revision, event, authority, now, lease_check=self._lease_check,
                )
            await asyncio.sleep(0)  # the window: another writer commits here
        with _without_checking():
            return await super().transition(task_id, expected_revision, event, authority)

    def _check_revision(self, snapshot: Snapshot, expected_revision: int, now: datetime) -> None:
        if not _acting.get():
            super()._check_revision(snapshot, expected_revision, now)
