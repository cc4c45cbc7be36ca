"""``MemoryStore``: the volatile reference implementation of the ``TaskStore`` protocol.

Capability matrix:

=================  =====  ==========================================================
capability         value  why
=================  =====  ==========================================================
durable            no     everything lives in this process's memory
multi_process      no     one process only
wakeups            yes    in-process: any thread or event loop wakes waiting workers
cancel_wakeups     yes    in-process, as ``wakeups``
exclusive_queues   yes    checked under the store lock
batch_transitions  yes    ``transition_many``: every item under one hold of the lock
transactional_     no     there are no application transactions to join
submit
=================  =====  ==========================================================

URL format: ``memory://`` (anything after ``//`` is a label only). Every open is a new,
empty store, so every open is already an isolated namespace.

Atomicity: every operation runs to completion under one ``threading.Lock`` without
awaiting, so it is atomic with respect to asyncio tasks *and* threads. Records are kept
as JSON documents, exactly like a database would, and decoded on every read: a value the
caller mutates after a call can never leak into the store, and a damaged document reads
as ``StoreCorrupt`` for that task only.
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import copy
import heapq
import logging
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from tasks_core import reports, rules
from tasks_core.authority import Access
from tasks_core.clock import Clock, SystemClock
from tasks_core.errors import (
    CapabilityNotSupported,
    CapacityExceeded,
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
    TaskStatus,
)

__all__ = ["MemoryStore"]

log = logging.getLogger(__name__)


@dataclass
class _Row:
    """One task as stored: its snapshot document, lease token and history documents."""

    doc: dict[str, Any]
    token: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    event_ids: dict[str, int] = field(default_factory=dict)
    view: Snapshot | None = None
    """The decoded ``doc``, cached for scans; never handed to a caller."""


_Waiter = tuple[frozenset[str], asyncio.AbstractEventLoop, "asyncio.Future[bool]"]
_CancelWaiter = tuple[Collection[str], asyncio.AbstractEventLoop, "asyncio.Future[set[str]]"]
UNREPORTED_CANCELS = 10_000
"""Cancels kept for the next ``wait_for_cancels`` when no waiter watched their task."""


class _OpenTasks:
    """The tasks ``claim_next`` must look at, per queue in claim order
    (``created_at``, id), so that a claim reads the head of its queues instead of
    every open task."""

    def __init__(self) -> None:
        self._keys: dict[str, tuple[str, datetime]] = {}
        self._queues: dict[str, list[tuple[datetime, str]]] = {}

    def add(self, snapshot: Snapshot) -> None:
        key = (snapshot.queue, snapshot.created_at)
        if self._keys.get(snapshot.id) == key:
            return
        self.discard(snapshot.id)
        self._keys[snapshot.id] = key
        bisect.insort(self._queues.setdefault(snapshot.queue, []),
                      (snapshot.created_at, snapshot.id))

    def discard(self, task_id: str) -> None:
        key = self._keys.pop(task_id, None)
        if key is None:
            return
        queue, created_at = key
        entries = self._queues[queue]
        del entries[bisect.bisect_left(entries, (created_at, task_id))]
        if not entries:
            del self._queues[queue]

    def __iter__(self) -> Iterator[str]:
        """Every open task id (valid until the next change)."""
        return iter(self._keys)

    def in_order(self, queues: Collection[str]) -> Iterator[tuple[datetime, str]]:
        """The open tasks of ``queues`` as ``(created_at, id)``, oldest first (from a copy
        of the index: claiming may change it)."""
        return heapq.merge(*(list(self._queues.get(queue, ())) for queue in queues))


class MemoryStore:
    """The reference store. Thread- and task-safe; see the module docstring."""

    CAPABILITIES = StoreCapabilities(
        durable=False,
        multi_process=False,
        wakeups=True,
        exclusive_queues=True,
        batch_transitions=True,
        cancel_wakeups=True,
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
            namespace: accepted for URL parity; every instance is its own namespace.

        Raises:
            InvalidInput: a limit below 1.
        """
        self.limits = StoreLimits.resolve(
            limits, max_tasks=max_tasks, max_active_tasks_per_scope=max_active_tasks_per_scope
        )
        self.namespace = namespace
        self._clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}
        self._open = _OpenTasks()
        """Tasks that may be claimable or hold a lease (see :meth:`_track`)."""
        self._waiters: list[_Waiter] = []
        self._cancel_waiters: list[_CancelWaiter] = []
        self._unreported: dict[str, None] = {}
        """Cancelled tasks no waiter watched yet, oldest first (at most
        :data:`UNREPORTED_CANCELS`)."""

    @property
    def capabilities(self) -> StoreCapabilities:
        """Frozen capabilities (see the module docstring)."""
        return self.CAPABILITIES

    # -- plumbing ------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[datetime]:
        """Hold the store lock and yield ``now`` sampled after it is held."""
        with self._lock:
            yield rules.tick(self._clock.now())

    def _decode(self, task_id: str, row: _Row) -> Snapshot:
        try:
            # Validate a copy: pydantic keeps JSON values by reference, and a caller
            # mutating a returned payload must never reach the stored document.
            return Snapshot.model_validate(copy.deepcopy(row.doc))
        except ValidationError:
            raise StoreCorrupt(task_id) from None

    def _decode_record(self, task_id: str, doc: dict[str, Any]) -> EventRecord:
        try:
            return EventRecord.model_validate(copy.deepcopy(doc))
        except ValidationError:
            raise StoreCorrupt(task_id) from None

    @staticmethod
    def _encode(snapshot: Snapshot) -> dict[str, Any]:
        return snapshot.model_dump(mode="json")

    def _view(self, task_id: str, row: _Row) -> Snapshot:
        """The stored snapshot for internal decisions (cached; never returned)."""
        if row.view is None:
            row.view = self._decode(task_id, row)
        return row.view

    def _set(self, row: _Row, snapshot: Snapshot) -> None:
        row.doc = self._encode(snapshot)
        row.view = None
        self._track(snapshot)

    def _track(self, snapshot: Snapshot) -> None:
        """Keep ``_open`` exact: the tasks ``claim_next`` must look at — not terminal, or
        holding a lease that has not ended (it may keep an exclusive queue busy)."""
        claim = snapshot.claim
        if snapshot.terminal and (claim is None or claim.ended):
            self._open.discard(snapshot.id)
        else:
            self._open.add(snapshot)

    def _row(self, task_id: str) -> _Row:
        row = self._rows.get(task_id)
        if row is None:
            raise TaskNotFound(task_id)
        return row

    def _tenant_matches(self, snapshot: Snapshot, tenant: str | None) -> bool:
        return tenant is None or snapshot.tenant == tenant

    def _expired(self, snapshot: Snapshot, now: datetime) -> bool:
        return snapshot.expired(now)

    def _visible(self, task_id: str, tenant: str | None, now: datetime) -> tuple[_Row, Snapshot]:
        row = self._row(task_id)
        snapshot = self._decode(task_id, row)
        if not self._tenant_matches(snapshot, tenant) or self._expired(snapshot, now):
            raise TaskNotFound(task_id)
        return row, snapshot

    def _find_event(self, row: _Row, event_id: str) -> int | None:
        return row.event_ids.get(event_id)

    def _check_revision(self, snapshot: Snapshot, expected_revision: int, now: datetime) -> None:
        rules.check_revision(snapshot, expected_revision, now)

    def _claimable(self, snapshot: Snapshot, now: datetime) -> bool:
        """Whether ``claim_next`` may serve ``snapshot`` at ``now``."""
        return rules.is_claimable(snapshot, now)

    def _lease_check(
        self,
        snapshot: Snapshot,
        token: str | None,
        lease: Lease,
        now: datetime,
        *,
        require_live: bool = True,
    ) -> None:
        rules.check_lease(snapshot, token, lease, now, require_live=require_live)

    def _check_capacity(self, new: NewTask, now: datetime, replacing: bool) -> None:
        if not replacing and len(self._rows) >= self.limits.tasks_cap:
            raise CapacityExceeded("max_tasks")
        if len(self._rows) - replacing < self.limits.scope_cap:
            return  # fewer tasks in the store than the limit: no tenant can reach it
        cap = self.limits.scope_cap
        active = 0
        for task_id in self._open:  # every task that is not terminal is open
            row = self._rows[task_id]
            if row.doc.get("tenant") != new.tenant or task_id == new.id:
                continue
            try:
                snapshot = self._view(task_id, row)
            except Exception:
                continue
            if rules.counts_as_active(snapshot, now):
                active += 1
                if active >= cap:
                    raise CapacityExceeded("max_active_tasks_per_scope")

    def _notify(self, queue: str) -> None:
        """Wake waiters on ``queue`` (called with the lock held)."""
        keep = []
        for queues, loop, future in self._waiters:
            if queue in queues:
                loop.call_soon_threadsafe(_resolve, future)
            else:
                keep.append((queues, loop, future))
        self._waiters = keep

    def _notify_cancel(self, task_id: str) -> None:
        """Report the cancel of ``task_id`` to the waiters watching it, else keep it for
        the next wait (called with the lock held)."""
        keep = []
        for task_ids, loop, future in self._cancel_waiters:
            if task_id in task_ids:
                loop.call_soon_threadsafe(_resolve_with, future, {task_id})
            else:
                keep.append((task_ids, loop, future))
        if len(keep) == len(self._cancel_waiters):
            self._unreported[task_id] = None
            if len(self._unreported) > UNREPORTED_CANCELS:
                del self._unreported[next(iter(self._unreported))]
        self._cancel_waiters = keep

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
            if replace is None and current_row is not None:
                raise TaskExists(rules.present(self._decode(new.id, current_row), now))
            if replace is not None:
                if current_row is None:
                    raise TaskNotFound(new.id)
                rules.check_replace(self._decode(new.id, current_row), replace, now)
            self._check_capacity(new, now, replacing=current_row is not None)
            previous = self._decode(new.id, current_row) if current_row else None
            snapshot = rules.new_snapshot(new, now, replace=previous)
            self._rows[new.id] = _Row(doc=self._encode(snapshot))
            self._track(snapshot)
            self._notify(snapshot.queue)
            return snapshot

    async def get(self, task_id: str, *, tenant: str | None) -> Snapshot:
        """The current snapshot (see ``TaskStore.get``).

        Raises:
            TaskNotFound, StoreCorrupt.
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
                except Exception:
                    reports.corrupt_skipped(log, task_id, "a listing")
                    continue
                if not self._tenant_matches(snapshot, query.tenant):
                    continue
                if self._expired(snapshot, now):
                    continue
                if rules.matches(snapshot, query.model_copy(update={"tenant": None}), now):
                    page.append(rules.present(self._decode(task_id, self._rows[task_id]), now))
                    if len(page) >= query.limit:
                        break
            return page

    async def history(self, task_id: str, *, tenant: str | None) -> builtins.list[EventRecord]:
        """Applied events of the current run (see ``TaskStore.history``).

        Raises:
            TaskNotFound, StoreCorrupt.
        """
        with self._locked() as now:
            row, _ = self._visible(task_id, tenant, now)
            return [self._decode_record(task_id, doc) for doc in row.history]

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
            return self._transition(task_id, expected_revision, event, authority, now)

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
        results: list[Transition | TasksError] = []
        with self._locked() as now:
            for task_id, expected_revision, event, authority in checked:
                try:
                    results.append(
                        self._transition(task_id, expected_revision, event, authority, now)
                    )
                except TasksError as refusal:
                    results.append(refusal)
        return results

    def _transition(
        self,
        task_id: str,
        expected_revision: int,
        event: Event,
        authority: Lease | Access,
        now: datetime,
    ) -> Transition:
        """``transition`` with the lock held and ``now`` sampled."""
        row = self._row(task_id)
        position = self._find_event(row, event.event_id)
        decision = rules.decide_transition(
            self._decode(task_id, row),
            row.token,
            None if position is None
            else lambda: self._decode_record(task_id, row.history[position]),
            expected_revision,
            event,
            authority,
            now,
            lease_check=self._lease_check,
            revision_check=self._check_revision,
        )
        if decision.write is not None:
            new, record = decision.write
            self._append(row, new, record)
            if new.status == TaskStatus.PENDING:
                self._notify(new.queue)
            elif new.status == TaskStatus.CANCELLED:
                self._notify_cancel(task_id)
        return decision.transition

    def _append(self, row: _Row, snapshot: Snapshot, record: EventRecord) -> None:
        self._set(row, snapshot)
        row.event_ids[record.event_id] = len(row.history)
        row.history.append(record.model_dump(mode="json"))

    # -- claims and leases ---------------------------------------------------------------

    async def claim(self, task_id: str, worker_id: str, lease_for: float) -> Claim:
        """Claim exactly ``task_id`` (see ``TaskStore.claim``).

        Raises:
            TaskNotFound, Unavailable, Deferred, InvalidInput, StoreCorrupt.
        """
        rules.check_lease_for(lease_for)
        rules.check_worker_id(worker_id)
        with self._locked() as now:
            row = self._row(task_id)
            snapshot = self._decode(task_id, row)
            rules.check_claimable(snapshot, now)
            claim = self._start(row, snapshot, worker_id, lease_for, now)
            if claim is None:
                raise Unavailable(f"The task exceeded {snapshot.work.max_deliveries} deliveries")
            return claim

    def _start(
        self, row: _Row, snapshot: Snapshot, worker_id: str, lease_for: float, now: datetime
    ) -> Claim | None:
        new, token, lease, failure = rules.start_claim(snapshot, worker_id, lease_for, now)
        if failure is not None:
            self._append(row, new, failure)
            reports.delivery_limit(snapshot.id, failure)
            return None
        assert lease is not None
        self._set(row, new)
        row.token = token
        return Claim(rules.present(new, now), lease)

    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
    ) -> builtins.list[Claim]:
        """Claim up to ``limit`` oldest claimable tasks (see ``TaskStore.claim_next``).

        Raises:
            InvalidInput: bad arguments.
        """
        rules.check_lease_for(lease_for)
        rules.check_worker_id(worker_id)
        wanted = rules.check_queues(queues)
        exclusive_set = rules.check_queues(exclusive, allow_empty=True)
        rules.check_limit(limit, maximum=rules.MAX_BATCH)
        with self._locked() as now:
            busy = {queue for queue in exclusive_set & wanted if self._queue_busy(queue, now)}
            claims: list[Claim] = []
            for _, task_id in self._open.in_order(wanted - busy):
                if len(claims) >= limit:
                    break
                row = self._rows[task_id]
                try:
                    snapshot = self._view(task_id, row)
                except Exception:
                    continue
                if snapshot.queue in busy or not self._claimable(snapshot, now):
                    continue
                claim = self._start(row, snapshot, worker_id, lease_for, now)
                if claim is not None:
                    claims.append(claim)
                    if snapshot.queue in exclusive_set:
                        busy.add(snapshot.queue)
            return claims

    def _queue_busy(self, queue: str, now: datetime) -> bool:
        """Whether a task of ``queue`` holds a live lease (an exclusive queue is busy)."""
        for _, task_id in self._open.in_order([queue]):
            try:
                if self._view(task_id, self._rows[task_id]).lease_live(now):
                    return True
            except Exception:
                continue
        return False

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
            self._notify(new.queue)
            return rules.present(new, now)

    async def worker_snapshot(self, lease: Lease) -> Snapshot:
        """The snapshot for the lease holder (see ``TaskStore.worker_snapshot``).

        Raises:
            LeaseLost, StoreCorrupt.
        """
        with self._locked() as now:
            _, snapshot = self._leased(lease, now)
            return rules.present(snapshot, now)

    def _leased(self, lease: Lease, now: datetime, *, live: bool = True) -> tuple[_Row, Snapshot]:
        if not isinstance(lease, Lease):
            raise TypeError("lease must be a Lease")
        row = self._rows.get(lease.task_id)
        if row is None:
            raise LeaseLost()
        snapshot = self._decode(lease.task_id, row)
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
            snapshot = self._decode(task_id, row)
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
                except Exception:
                    reports.corrupt_skipped(log, task_id, "reap")
                    continue
                if snapshot.expired(now):
                    del self._rows[task_id]
                    self._open.discard(task_id)
                    reaped.append(task_id)
            return reaped

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """Wait for a wakeup on ``queues`` or ``timeout`` seconds (see
        ``TaskStore.wait_for_work``)."""
        wanted = rules.check_queues(queues)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        entry = (wanted, loop, future)
        with self._lock:
            self._waiters.append(entry)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            return False
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    async def wait_for_cancels(
        self, task_ids: Collection[str], timeout: float
    ) -> builtins.set[str]:
        """Wait until a task of ``task_ids`` is cancelled or ``timeout`` seconds pass
        (see ``TaskStore.wait_for_cancels``); each cancel is reported once.

        Raises:
            InvalidInput: a bad timeout.
        """
        seconds = _wait_seconds(timeout)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[set[str]] = loop.create_future()
        entry = (task_ids, loop, future)
        with self._lock:
            found = {task_id for task_id in list(task_ids) if task_id in self._unreported}
            if found:
                for task_id in found:
                    del self._unreported[task_id]
                return found
            self._cancel_waiters.append(entry)
        try:
            return await asyncio.wait_for(asyncio.shield(future), seconds)
        except TimeoutError:
            return set()
        finally:
            with self._lock:
                if entry in self._cancel_waiters:
                    self._cancel_waiters.remove(entry)

    async def aclose(self) -> None:
        """Nothing to release; waiting workers are woken so they can stop."""
        with self._lock:
            for _, loop, future in self._waiters:
                loop.call_soon_threadsafe(_resolve, future)
            self._waiters.clear()
            for _, loop, cancel_future in self._cancel_waiters:
                loop.call_soon_threadsafe(_resolve_with, cancel_future, set())
            self._cancel_waiters.clear()

    # -- test support --------------------------------------------------------------------

    def _corrupt(self, task_id: str) -> None:
        """Damage the stored document of ``task_id`` (contract-suite support only).

        The damage carries the marker ``tasks-corrupt-secret``: the suite checks that
        ``StoreCorrupt`` never quotes it.
        """
        with self._lock:
            row = self._row(task_id)
            row.view = None
            row.doc["revision"] = "not a number \x00 tasks-corrupt-secret"


def _resolve(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(True)


def _wait_seconds(timeout: float) -> float:
    """A wait's ``timeout``: a real, finite number of seconds >= 0.

    Raises:
        InvalidInput: anything else.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 <= timeout < float("inf"):
        raise InvalidInput("timeout must be a finite number of seconds >= 0")
    return float(timeout)


def _resolve_with(future: asyncio.Future[set[str]], task_ids: set[str]) -> None:
    if not future.done():
        future.set_result(task_ids)

