"""Broken stores that count or report the wrong thing: a limited queue's live leases or
recent claims counted over every queue, a created task returned as read instead of as
stored, a task reaped under the live lease of a run past its TTL. ``test_self.py`` names
the contract test that catches each.
"""

from __future__ import annotations

import builtins
from datetime import datetime, timedelta
from typing import Any

from tasks_core import NewTask, Snapshot, rules
from tasks_core.errors import StoreCorrupt
from tasks_store_memory import MemoryStore
from tasks_store_memory._rows import ClaimLog

__all__ = [
    "CreateReturnsTheTaskAsRead",
    "RateCountedOverEveryQueue",
    "ReapsARunPastItsTTL",
    "RunningCountedOverEveryQueue",
]


class RunningCountedOverEveryQueue(MemoryStore):
    """Counts a limited queue's live leases over every queue together (a count without its
    per-queue grouping): a busy queue shuts the others."""

    def _queue_running(self, queue: str, now: datetime) -> int:
        queues = {self._view(task_id, row).queue for task_id, row in self._rows.items()}
        return sum(MemoryStore._queue_running(self, other, now) for other in queues)


class _LogOfEveryQueue(ClaimLog):
    """Counts the claims of every queue in a window, whichever queue is asked about."""

    def count(self, queue: str, window: timedelta, now: datetime) -> int:
        return sum(super(_LogOfEveryQueue, self).count(other, window, now)
                   for other in list(self._instants))


class RateCountedOverEveryQueue(MemoryStore):
    """Counts a rate-limited queue's recent claims over every queue (a claim log read
    without ``WHERE queue = …``): one queue's claims use up another's rate."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._claim_log = _LogOfEveryQueue()


class CreateReturnsTheTaskAsRead(MemoryStore):
    """Returns a created task with its derived status (``scheduled`` when delayed)
    instead of as stored (``pending``)."""

    async def create(
        self, new: NewTask, *, replace: Snapshot | None = None, transaction: Any = None
    ) -> Snapshot:
        created = await super().create(new, replace=replace, transaction=transaction)
        return rules.present(created, await self.now())


class ReapsARunPastItsTTL(MemoryStore):
    """Reaps every expired task, a running one past its TTL included (``expired``
    instead of ``rules.gone``): its row goes from under the run."""

    async def reap(self, limit: int = 1000) -> builtins.list[str]:
        rules.check_limit(limit)
        with self._locked() as now:
            reaped: list[str] = []
            for task_id in sorted(self._rows):
                try:
                    expired = self._view(task_id, self._rows[task_id]).expired(now)
                except StoreCorrupt:
                    continue
                if expired and len(reaped) < limit:
                    del self._rows[task_id]
                    self._open.discard(task_id)
                    reaped.append(task_id)
            return reaped
