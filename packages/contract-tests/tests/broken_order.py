"""Broken stores for which refusal wins when several apply (the error order) and for
what keeps a queue busy. Each breaks exactly one rule of a ``MemoryStore``;
``test_self.py`` names the contract test that catches it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tasks_core import Claim, Event, Lease, NewTask, Snapshot, TaskStatus, Transition, rules
from tasks_core.arguments import check_lease_for
from tasks_core.authority import Access
from tasks_core.errors import StoreCorrupt
from tasks_store_memory import MemoryStore

__all__ = [
    "CancelledTasksFreeTheirQueue",
    "CapacityCheckedBeforeTheId",
    "LeaseForCheckedBeforeTheLease",
    "RevisionCheckedBeforeAuthorizing",
]


class CancelledTasksFreeTheirQueue(MemoryStore):
    """Counts only a pending task's live lease toward its queue: a task cancelled under
    a live lease frees its exclusive queue while its holder may still run it."""

    def _queue_running(self, queue: str, now: datetime) -> int:
        running = 0
        for task_id in self._open.held(queue):
            try:
                snapshot = self._view(task_id, self._rows[task_id])
            except StoreCorrupt:
                continue
            running += snapshot.status == TaskStatus.PENDING and snapshot.lease_live(now)
        return running


class CapacityCheckedBeforeTheId(MemoryStore):
    """Counts ``max_tasks`` before it looks at the id: a taken id at a full store reads
    ``CapacityExceeded`` instead of ``TaskExists``."""

    async def create(
        self, new: NewTask, *, replace: Snapshot | None = None, transaction: Any = None
    ) -> Snapshot:
        if replace is None and isinstance(new, NewTask):
            with self._locked() as now:
                self._check_capacity(new, now, replacing=False)
        return await super().create(new, replace=replace, transaction=transaction)


class RevisionCheckedBeforeAuthorizing(MemoryStore):
    """Checks the expected revision of a new event before it authorizes the sender: an
    outsider at a stale revision reads ``RevisionConflict`` (which tells that the task
    exists, and its revision) instead of ``TaskNotFound``."""

    async def transition(
        self, task_id: str, expected_revision: int, event: Event, authority: Lease | Access
    ) -> Transition:
        with self._locked() as now:
            row = self._rows.get(task_id)
            if row is not None and self._find_event(row, event.event_id) is None:
                rules.check_revision(self._view(task_id, row), expected_revision, now)
        return await super().transition(task_id, expected_revision, event, authority)


class LeaseForCheckedBeforeTheLease(MemoryStore):
    """Checks ``lease_for`` before the lease: a stale lease with a bad ``lease_for``
    reads ``InvalidInput`` instead of ``LeaseLost``."""

    async def renew(self, lease: Lease, lease_for: float) -> Claim:
        check_lease_for(lease_for)
        return await super().renew(lease, lease_for)
