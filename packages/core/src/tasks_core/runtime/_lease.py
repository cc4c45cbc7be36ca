"""The lease of one run, and every store operation made with it, one at a time.

``renew`` hands out a new token and makes the old lease stale, so two operations of one
run must never overlap: one may otherwise use a token the other just replaced. A
:class:`LeaseCell` holds the current lease behind a lock and retries what may be retried:
a ``RevisionConflict`` by taking the current revision from the conflict (bounded), and a
``StoreUnavailable`` with a backoff for as long as the lease lasts by the worker's own
clock (an outcome the lease still covers is never thrown away for a short outage; the event
id is stable, so a retried write that had in fact landed answers ``duplicate``). With a
:class:`GroupCommit`, terminal events go through it (same lease, same revision, same
retries) instead of one ``transition`` each.
"""

from __future__ import annotations

import asyncio
import logging
import time

from tasks_core.errors import RevisionConflict, StoreUnavailable
from tasks_core.events import Event, Transition
from tasks_core.models import Lease, Snapshot
from tasks_core.runtime._group import GroupCommit
from tasks_core.runtime._outage import Outage
from tasks_core.store import TaskStore

__all__ = ["LeaseCell", "write_outage"]

log = logging.getLogger("tasks_core._lease")  # a stable name: logging configs refer to it

MAX_CONFLICTS = 8
MAX_BACKOFF_S = 1.0
"""The longest wait between two tries of a write the store refused as unavailable."""
GROUPED = frozenset({"completed", "failed", "retry_requested"})
"""Terminal events, written through the worker's group commit when it has one."""


def write_outage() -> Outage:
    """The log of run events refused as unavailable: once per outage (``Outage``)."""
    return Outage(log, "writing run events", "each is tried again while its run's lease lasts")


class LeaseCell:
    """The current lease of one run; see the module docstring."""

    def __init__(self, store: TaskStore, lease: Lease, lease_for: float,
                 group: GroupCommit | None = None, writes: Outage | None = None) -> None:
        self.store = store
        self.lease = lease
        self.group = group
        self.writes = writes or write_outage()
        """Writes refused as unavailable, logged once per outage (the worker's, shared)."""
        self._lock = asyncio.Lock()
        self.live_until = time.monotonic() + lease_for
        """About when the lease runs out by this process's clock (from the claim's arrival,
        or from when a renew was asked: a round trip off the store's expiry at most; a
        write tried past that expiry is fenced off, never applied)."""

    async def renew(self, lease_for: float) -> Snapshot:
        """Extend the lease; the cell keeps the new one.

        Raises:
            LeaseLost: the lease is no longer this run's.
            StoreUnavailable: the store failed (the lease is unchanged).
        """
        async with self._lock:
            asked = time.monotonic()
            claim = await self.store.renew(self.lease, lease_for)
            self.lease = claim.lease
            self.live_until = asked + lease_for
            return claim.snapshot

    async def progress(self, value: float, message: str | None) -> Snapshot:
        """Report progress.

        Raises:
            LeaseLost, StoreUnavailable.
        """
        async with self._lock:
            return await self.store.report_progress(self.lease, value, message)

    async def snapshot(self) -> Snapshot:
        """The task as the lease holder sees it.

        Raises:
            LeaseLost, StoreUnavailable.
        """
        async with self._lock:
            return await self.store.worker_snapshot(self.lease)

    async def release(self) -> Snapshot:
        """Give the task back (claimable at once).

        Raises:
            LeaseLost, StoreUnavailable.
        """
        async with self._lock:
            return await self.store.release(self.lease)

    async def write(self, event: Event, revision: int) -> Transition:
        """Send a worker event at ``revision``, retrying conflicts and transient failures.

        Raises:
            LeaseLost: the lease is no longer this run's (the write is fenced off).
            RevisionConflict: still conflicting after ``MAX_CONFLICTS`` re-reads.
            StoreUnavailable: still failing once the lease has run out (``live_until`` as
                the first failure found it: renewals meanwhile do not prolong the tries).
            EventIdReused, InvalidInput: as ``TaskStore.transition``.
        """
        conflicts = unavailable = 0
        deadline = 0.0
        while True:
            try:
                async with self._lock:
                    if self.group is not None and event.kind in GROUPED:
                        written = await self.group.write(
                            self.lease.task_id, revision, event, self.lease
                        )
                    else:
                        written = await self.store.transition(
                            self.lease.task_id, revision, event, self.lease
                        )
                self.writes.worked()
                return written
            except RevisionConflict as exc:
                conflicts += 1
                if conflicts >= MAX_CONFLICTS:
                    raise
                revision = exc.current.revision
            except StoreUnavailable:
                unavailable += 1
                deadline = deadline or self.live_until  # the lease as the outage began
                pause = min(0.05 * 2**unavailable, MAX_BACKOFF_S)
                if time.monotonic() + pause >= deadline:
                    raise
                self.writes.failed()
                await asyncio.sleep(pause)
