"""``MemoryStore``: the volatile reference implementation of the ``TaskStore`` protocol.

Every operation runs to completion under one lock without awaiting; each task's snapshot
is kept as an object of the store's own, detached from every caller's copy, and its
history as JSON text. :class:`MemoryStore` lists its capabilities, its URL format and what
its atomicity guarantees.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from tasks_core import reports, rules, storekit
from tasks_core.authority import Access
from tasks_core.clock import Clock
from tasks_core.durations import check_wait_timeout
from tasks_core.errors import (
    CapabilityNotSupported,
    InvalidInput,
    LeaseLost,
    StoreCorrupt,
    TaskExists,
    TaskNotFound,
    TasksError,
    Unavailable,
)
from tasks_core.events import Event, EventRecord, Transition
from tasks_core.models import (
    Claim,
    Lease,
    NewTask,
    Snapshot,
    StoreCapabilities,
    StoreLimits,
    TaskQuery,
)

from tasks_store_memory._creates import Creates
from tasks_store_memory._records import Loaded, log
from tasks_store_memory._rows import Row
from tasks_store_memory._wakeups import Wakeups

__all__ = ["MemoryStore"]

_Row = Row  # (the name the contract suite's broken stores import)


class MemoryStore(Creates):
    """The reference store. Thread- and task-safe.

    Capabilities:

    =================  =====  ==========================================================
    capability         value  why
    =================  =====  ==========================================================
    durable            no     everything lives in this process's memory
    multi_process      no     one process only
    wakeups            yes    in-process: any thread or event loop wakes waiting workers
    cancel_wakeups     yes    in-process, as ``wakeups``
    exclusive_queues   yes    checked under the store lock
    batch_transitions  yes    ``transition_many``: every item under one hold of the lock
    batch_create       yes    ``create_many``: the whole batch under one hold of the lock
    transactional_     no     there are no application transactions to join
    submit
    =================  =====  ==========================================================

    URL format: ``memory://`` (anything after ``//`` is a label only). Every open is a new,
    empty store, so every open is already an isolated namespace.

    Atomicity: every operation runs to completion under one ``threading.Lock`` without
    awaiting, so it is atomic with respect to asyncio tasks *and* threads. Each task's
    snapshot is kept as a frozen object detached from the caller's copy
    (``models.detached``), and every snapshot a call returns is detached again: a value
    the caller mutates before or after a call can never leak into the store; a damaged
    record reads as ``StoreCorrupt`` for that task only. ``claim_next`` reads an index of
    the open tasks, the claimable ones in claim order (``_records.py``, ``_rows.py``).
    """

    CAPABILITIES = StoreCapabilities(
        durable=False,
        multi_process=False,
        wakeups=True,
        exclusive_queues=True,
        batch_transitions=True,
        cancel_wakeups=True,
        queue_limits=True,
        batch_create=True,
        counts=True,
    )

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        limits: StoreLimits | None = None,
        max_tasks: int | None = None,
        max_active_tasks_per_scope: int | None = None,
        namespace: str | None = None,
    ) -> None:
        """Create an empty store.

        Args:
            clock: the store clock (default: the system clock).
            limits: capacity limits; ``max_tasks``/``max_active_tasks_per_scope`` override.
            namespace: accepted for URL parity and unused: every instance is its own
                namespace.

        Raises:
            InvalidInput: a limit below 1.
        """
        super().__init__(clock)
        self.limits = StoreLimits.resolve(
            limits, max_tasks=max_tasks, max_active_tasks_per_scope=max_active_tasks_per_scope
        )
        del namespace
        self._wakeups = Wakeups(self._lock)

    @property
    def capabilities(self) -> StoreCapabilities:
        """Frozen capabilities (see the module docstring)."""
        return self.CAPABILITIES

    # -- creation and reads --------------------------------------------------------------

    async def now(self) -> datetime:
        """The store clock (whole milliseconds)."""
        return rules.tick(self._clock.now())

    async def create(
        self, new: NewTask, *, replace: Snapshot | None = None, transaction: Any = None
    ) -> Snapshot:
        """Store ``new`` at revision 0 (see ``TaskStore.create``).

        Raises:
            TaskExists, RevisionConflict, Unavailable, TaskNotFound, CapacityExceeded.
            CapabilityNotSupported: ``transaction`` given (no application transactions).
        """
        if transaction is not None:
            raise CapabilityNotSupported("The memory store has no transactions to join "
                                         "(capability 'transactional_submit' is off)")
        if not isinstance(new, NewTask):
            raise InvalidInput("create() takes a NewTask")
        with self._locked() as now:
            current_row = self._rows.get(new.id)
            current = None if current_row is None else self._take(new.id, current_row)
            if replace is None and current is not None:
                raise TaskExists(rules.present(current, now))
            if replace is not None:
                if current is None:
                    raise TaskNotFound(new.id)
                rules.check_replace(current, replace, now)
            self._check_capacity(new, now, replacing=current is not None)
            snapshot = rules.new_snapshot(new, now, replace=current)
            self._add(snapshot)
            self._wakeups.notify(snapshot.queue)
            return snapshot

    async def get(self, task_id: str, *, tenant: str | None) -> Snapshot:
        """The current snapshot (see ``TaskStore.get``).

        Raises:
            InvalidInput, TaskNotFound, StoreCorrupt.
        """
        with self._locked() as now:
            return rules.present(self._visible(task_id, tenant, now)[1], now)

    async def list(self, query: TaskQuery) -> builtins.list[Snapshot]:
        """Matching tasks by id (see ``TaskStore.list``); corrupt records are skipped."""
        with self._locked() as now:
            page: list[Snapshot] = []
            for task_id in sorted(self._rows):
                if query.after is not None and task_id <= query.after:
                    continue
                try:
                    snapshot = self._view(task_id, self._rows[task_id])
                except StoreCorrupt:
                    reports.corrupt_skipped(log, task_id, "a listing")
                    continue
                if not self._tenant_matches(snapshot, query.tenant):
                    continue
                if self._expired(snapshot, now):
                    continue
                if rules.matches(snapshot, query.model_copy(update={"tenant": None}), now):
                    page.append(rules.present(self._take(task_id, self._rows[task_id]), now))
                    if len(page) >= query.limit:
                        break
            return page

    async def history(self, task_id: str, *, tenant: str | None) -> builtins.list[EventRecord]:
        """Applied events of the current run (see ``TaskStore.history``).

        Raises:
            InvalidInput, TaskNotFound, StoreCorrupt.
        """
        with self._locked() as now:
            row, _ = self._visible(task_id, tenant, now)
            return [self._record(doc) for doc in row.history]

    # -- transitions ---------------------------------------------------------------------

    async def transition(
        self,
        task_id: str,
        expected_revision: int,
        event: Event,
        authority: Lease | Access,
    ) -> Transition:
        """Apply ``event`` atomically (see ``TaskStore.transition``).

        Raises:
            TaskNotFound, LeaseLost, AuthorizationError, EventIdReused, RevisionConflict,
            InvalidInput, StoreCorrupt.
        """
        if not isinstance(authority, (Lease, Access)):
            raise TypeError("authority must be a Lease or an Access")
        with self._locked() as now:
            plan = self._plan([(task_id, expected_revision, event, authority)], now)
        return storekit.transition_result(plan)

    async def transition_many(
        self, items: Sequence[rules.BatchItem]
    ) -> builtins.list[Transition | TasksError]:
        """Apply several transitions in one atomic step (see ``TaskStore.transition_many``):
        each decided by the same code as :meth:`transition`, in order, under one hold of
        the lock; a refusal is returned in the item's place.

        Raises:
            TypeError: a malformed item.
            InvalidInput: more than 1000 items.
        """
        checked = rules.check_batch(items)
        with self._locked() as now:
            return self._plan(checked, now).results

    def _plan(self, items: Sequence[rules.BatchItem], now: datetime) -> storekit.TransitionPlan:
        """Decide ``items`` with the store kit (writing each applied event as it is
        decided, under the lock held by the caller) and wake whom the plan names."""
        loaded = {task_id: Loaded(self, task_id, row) for task_id, *_ in items
                  if (row := self._rows.get(task_id)) is not None}
        plan = storekit.plan_transitions(items, loaded, now, lease_check=self._lease_check,
                                         revision_check=self._check_revision)
        for queue in plan.wake:
            self._wakeups.notify(queue)
        for task_id in plan.cancelled:
            self._wakeups.notify_cancel(task_id)
        return plan

    # -- claims and leases ---------------------------------------------------------------

    async def claim(self, task_id: str, worker_id: str, lease_for: float) -> Claim:
        """Claim exactly ``task_id`` (see ``TaskStore.claim``).

        Raises:
            TaskNotFound, Unavailable, Deferred, InvalidInput, StoreCorrupt.
        """
        storekit.check_claim(task_id, worker_id, lease_for)
        with self._locked() as now:
            row = self._row(task_id)
            started = storekit.claim_one(self._view(task_id, row), worker_id, lease_for, now,
                                         start=self._start_claim)
            self._write(row, started)
        return storekit.claim_result(started)

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
        """Claim up to ``limit`` tasks in claim order (see ``TaskStore.claim_next``): the
        index offers the heads of the open queues to ``storekit.ClaimScan``, within the
        room the limited queues' live leases and claim logs leave.

        Raises:
            InvalidInput: bad arguments.
        """
        request = storekit.check_claim_next(worker_id, lease_for, queues, limit, exclusive,
                                            start, limits)
        with self._locked() as now:
            self._open.wake(now)
            running = {queue: self._queue_running(queue, now) for queue in request.limited}
            recent = {queue: self._claim_log.count(queue, bounds.window, now)
                      for queue, bounds in request.limits.items() if bounds.window}
            scan = storekit.ClaimScan(request, now, running=running, recent=recent,
                                      candidate=self._claimable, start=self._start_claim)
            while not scan.done:  # again only when a task failed past its delivery limit
                picked = self._pick(scan.open_queues(), scan.remaining, scan.room, now)
                if not picked:
                    break
                for task_id, row in picked:
                    started = scan.offer(self._view(task_id, row))
                    if started is not None:
                        self._write(row, started)
            for queue, bounds in request.limits.items():
                if bounds.window:
                    self._claim_log.add(queue, now, scan.claimed(queue), bounds.window)
        scan.report()
        return scan.claims

    def _write(self, row: Row, started: storekit.Started) -> None:
        """Store a claim decided by the store kit (or the failure it decided instead)."""
        if started.failure is not None:
            self._append(row, started.snapshot, started.failure)
            return
        self._set(row, started.snapshot)
        row.token = started.token

    async def next_available(self, queues: Sequence[str]) -> datetime | None:
        """The earliest available instant ahead of a waiting task of ``queues`` (see
        ``TaskStore.next_available``).

        Raises:
            InvalidInput: bad queue names.
        """
        wanted = rules.check_queues(queues)
        with self._locked() as now:
            return self._next_available(wanted, now)

    async def renew(self, lease: Lease, lease_for: float) -> Claim:
        """Extend a live lease (see ``TaskStore.renew``).

        Raises:
            LeaseLost, InvalidInput, StoreCorrupt.
        """
        with self._locked() as now:
            row, snapshot = self._leased(lease, now)
            new, token, new_lease = rules.renew(snapshot, row.token, lease, lease_for, now)
            self._set(row, new)
            row.token = token
            return Claim(rules.present(new, now), new_lease)

    async def report_progress(self, lease: Lease, value: float, message: str | None) -> Snapshot:
        """Record progress (see ``TaskStore.report_progress``).

        Raises:
            LeaseLost, InvalidInput, StoreCorrupt.
        """
        with self._locked() as now:
            row, snapshot = self._leased(lease, now)
            new = rules.report_progress(snapshot, row.token, lease, value, message, now)
            self._set(row, new)
            return rules.present(new, now)

    async def release(self, lease: Lease) -> Snapshot:
        """Make the task claimable again at once (see ``TaskStore.release``).

        Raises:
            LeaseLost, StoreCorrupt.
        """
        with self._locked() as now:
            row, snapshot = self._leased(lease, now, live=False)
            new = rules.release(snapshot, row.token, lease, now)
            self._set(row, new)
            self._wakeups.notify(new.queue)
            return rules.present(new, now)

    async def worker_snapshot(self, lease: Lease) -> Snapshot:
        """The snapshot for the lease holder (see ``TaskStore.worker_snapshot``).

        Raises:
            LeaseLost, StoreCorrupt.
        """
        with self._locked() as now:
            _, snapshot = self._leased(lease, now)
            return rules.present(snapshot, now)

    def _leased(self, lease: Lease, now: datetime, *, live: bool = True) -> tuple[Row, Snapshot]:
        if not isinstance(lease, Lease):
            raise TypeError("lease must be a Lease")
        row = self._rows.get(lease.task_id)
        if row is None:
            raise LeaseLost()
        snapshot = self._take(lease.task_id, row)
        self._lease_check(snapshot, row.token, lease, now, require_live=live)
        return row, snapshot

    # -- administration ------------------------------------------------------------------

    async def delete(self, task_id: str, *, expected_revision: int) -> None:
        """Remove a terminal task (see ``TaskStore.delete``).

        Raises:
            TaskNotFound, RevisionConflict, Unavailable.
        """
        with self._locked() as now:
            row = self._row(task_id)
            snapshot = self._take(task_id, row)
            rules.check_revision(snapshot, expected_revision, now)
            if not snapshot.terminal:
                raise Unavailable("Only a terminal task can be deleted")
            del self._rows[task_id]
            self._open.discard(task_id)

    async def reap(self, limit: int = 1000) -> builtins.list[str]:
        """Delete up to ``limit`` expired tasks (see ``TaskStore.reap``).

        Raises:
            InvalidInput: ``limit`` < 1.
        """
        rules.check_limit(limit)
        with self._locked() as now:
            reaped: list[str] = []
            for task_id in sorted(self._rows):
                if len(reaped) >= limit:
                    break
                try:
                    snapshot = self._view(task_id, self._rows[task_id])
                except StoreCorrupt:
                    reports.corrupt_skipped(log, task_id, "reap")
                    continue
                if rules.gone(snapshot, now):
                    del self._rows[task_id]
                    self._open.discard(task_id)
                    reaped.append(task_id)
            return reaped

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """Wait for a wakeup on ``queues`` or ``timeout`` seconds (see
        ``TaskStore.wait_for_work``)."""
        return await self._wakeups.wait_for_work(rules.check_queues(queues),
                                                 check_wait_timeout(timeout))

    async def wait_for_cancels(
        self, task_ids: Collection[str], timeout: float
    ) -> builtins.set[str]:
        """Wait until a task of ``task_ids`` is cancelled or ``timeout`` seconds pass
        (see ``TaskStore.wait_for_cancels``); each cancel is reported once.

        Raises:
            InvalidInput: a bad timeout.
        """
        return await self._wakeups.wait_for_cancels(task_ids, check_wait_timeout(timeout))

    async def aclose(self) -> None:
        """Nothing to release; waiting workers are woken so they can stop."""
        self._wakeups.close()

