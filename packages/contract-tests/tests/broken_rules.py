"""Broken stores for the rules a store gets wrong without a race: which tasks a claim
serves and what it records, what counts toward a capacity, timeouts, copies, reports of
corrupt records, clocks and limits. Each breaks exactly one rule of a ``MemoryStore``;
``test_self.py`` names the contract test that catches it.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from tasks_core import (
    Access,
    CancelReason,
    CapacityExceeded,
    Claim,
    ErrorInfo,
    Event,
    Failed,
    Lease,
    NewTask,
    RetryRequested,
    Snapshot,
    SystemClock,
    TaskQuery,
    TaskStatus,
    Transition,
    rules,
    storekit,
)
from tasks_core._model import replaced
from tasks_core.clock import Clock
from tasks_core.errors import StoreCorrupt, TaskNotFound
from tasks_core.events import EventRecord
from tasks_store_memory import MemoryStore
from tasks_store_memory.store import _Row

__all__ = [
    "BusyExclusiveQueueBlocksTheCall",
    "ClaimNextAliasesStoredData",
    "ClaimNextServesCancelledPendingTasks",
    "ClaimNextServesDelayedTasksEarly",
    "ClaimNextServesLapsedCancelledTasks",
    "CorruptSkipNamesNoOperation",
    "CorruptSkipNotReported",
    "DeliveryFailureOfClaimNextNotRecorded",
    "InstantsRoundedToTheMillisecond",
    "ListAliasesStoredData",
    "NowIgnoresTheInjectedClock",
    "OtherTenantsRecordsDecoded",
    "RecoveredNeverSet",
    "StartedAtResetByEveryClaim",
    "TenantArgumentNotChecked",
    "TimeoutOverwritesACancel",
    "TimeoutRetriedWhenAttemptsLeft",
    "WaitingTasksNotCounted",
    "WakeupsOnlyOnCreateAndRelease",
    "WallClockInsteadOfTheStoreClock",
    "WorkerSnapshotAliasesStoredData",
]

# -- what a claim serves and records -------------------------------------------------------


class _ServesCancelledTasks(MemoryStore):
    """Serves, after the claimable tasks, the cancelled tasks :meth:`_candidate` admits
    (what a second candidate query with a filter too loose does)."""

    def _candidate(self, snapshot: Snapshot, now: datetime) -> bool:
        raise NotImplementedError

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
        claims = await super().claim_next(worker_id, lease_for, queues=queues, limit=limit,
                                          exclusive=exclusive, start=start, limits=limits)
        with self._locked() as now:
            for task_id, row in sorted(self._rows.items()):
                if len(claims) >= limit:
                    break
                try:
                    snapshot = self._take(task_id, row)
                except Exception:
                    continue
                if (snapshot.queue in queues and snapshot.status == TaskStatus.CANCELLED
                        and self._candidate(snapshot, now)):
                    started = storekit.started(snapshot, worker_id, lease_for, now)
                    self._write(row, started)
                    if started.claim is not None:
                        claims.append(started.claim)
        return claims


class ClaimNextServesCancelledPendingTasks(_ServesCancelledTasks):
    """Its candidates are "not completed, not failed": a task cancelled before any claim
    is served."""

    def _candidate(self, snapshot: Snapshot, now: datetime) -> bool:
        return snapshot.claim is None


class ClaimNextServesLapsedCancelledTasks(_ServesCancelledTasks):
    """Recovers every lapsed lease, whatever its task's status: a task cancelled under a
    lease that then lapsed runs again."""

    def _candidate(self, snapshot: Snapshot, now: datetime) -> bool:
        claim = snapshot.claim
        return claim is not None and not claim.ended and now >= claim.expires_at


class ClaimNextServesDelayedTasksEarly(MemoryStore):
    """Its candidates ignore a delayed task's ``run_at`` (a filter on ``retry_at`` only,
    as before delayed tasks): a scheduled task is served at once."""

    def _claimable(self, snapshot: Snapshot, now: datetime) -> bool:
        return rules.is_claimable(replaced(snapshot, run_at=None), now)


class BusyExclusiveQueueBlocksTheCall(MemoryStore):
    """Returns nothing at all while one of the call's exclusive queues is busy, instead of
    serving the call's other queues."""

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
        rules.check_lease_for(lease_for)
        rules.check_worker_id(worker_id)
        wanted = rules.check_queues(queues)
        exclusive_set = rules.check_queues(exclusive, allow_empty=True)
        with self._locked() as now:
            if any(self._queue_running(queue, now) for queue in exclusive_set & wanted):
                return []
        return await super().claim_next(worker_id, lease_for, queues=queues, limit=limit,
                                        exclusive=exclusive, start=start, limits=limits)


class RecoveredNeverSet(MemoryStore):
    """Never marks a takeover of a lapsed lease ``claim.recovered``."""

    def _start_claim(
        self, snapshot: Snapshot, worker_id: str, lease_for: float, now: datetime, *,
        held: bool = False,
    ) -> tuple[Snapshot, str, Lease | None, EventRecord | None]:
        new, token, lease, failure = super()._start_claim(snapshot, worker_id, lease_for, now,
                                                          held=held)
        if new.claim is None:
            return new, token, lease, failure
        plain = new.claim.model_copy(update={"recovered": False})
        return new.model_copy(update={"claim": plain}), token, lease, failure


class DeliveryFailureOfClaimNextNotRecorded(MemoryStore):
    """``claim_next`` fails a task past its delivery limit without the ``failed`` record in
    its history (``claim`` still writes it)."""

    _in_claim_next = False

    async def claim_next(self, worker_id: str, lease_for: float, **options: Any
                         ) -> builtins.list[Claim]:
        self._in_claim_next = True
        try:
            return await super().claim_next(worker_id, lease_for, **options)
        finally:
            self._in_claim_next = False

    def _start_claim(
        self, snapshot: Snapshot, worker_id: str, lease_for: float, now: datetime, *,
        held: bool = False,
    ) -> tuple[Snapshot, str, Lease | None, EventRecord | None]:
        new, token, lease, failure = super()._start_claim(snapshot, worker_id, lease_for, now,
                                                          held=held)
        return new, token, lease, None if self._in_claim_next else failure


class StartedAtResetByEveryClaim(MemoryStore):
    """Sets ``started_at`` to the instant of every claim, not only the first."""

    def _start_claim(
        self, snapshot: Snapshot, worker_id: str, lease_for: float, now: datetime, *,
        held: bool = False,
    ) -> tuple[Snapshot, str, Lease | None, EventRecord | None]:
        fresh = snapshot.model_copy(update={"started_at": None})
        return super()._start_claim(fresh, worker_id, lease_for, now, held=held)


# -- capacity and timeouts ------------------------------------------------------------------


class WaitingTasksNotCounted(MemoryStore):
    """Counts a tenant's active tasks without those waiting for input."""

    def _check_capacity(self, new: NewTask, now: datetime, replacing: bool) -> None:
        if not replacing and len(self._rows) >= self.limits.tasks_cap:
            raise CapacityExceeded("max_tasks")
        active = 0
        for task_id, row in self._rows.items():
            try:
                snapshot = self._take(task_id, row)
            except StoreCorrupt:
                continue
            if task_id == new.id or snapshot.tenant != new.tenant:
                continue
            if snapshot.status != TaskStatus.WAITING_INPUT and rules.counts_as_active(
                    snapshot, now):
                active += 1
        if active >= self.limits.scope_cap:
            raise CapacityExceeded("max_active_tasks_per_scope")


class CorruptRecordsNotCounted(MemoryStore):
    """Counts a tenant's active tasks by reading each open record and skipping one that
    reads as damaged (what ``MemoryStore`` did before it counted from the snapshot last
    written, damaged or not): a damaged live task frees a slot."""

    def _active_tasks(self, tenant: str, now: datetime) -> int:
        active = 0
        for task_id in self._open:
            try:
                snapshot = self._view(task_id, self._rows[task_id])
            except StoreCorrupt:
                continue
            active += snapshot.tenant == tenant and rules.counts_as_active(snapshot, now)
        return active


class TimeoutRetriedWhenAttemptsLeft(MemoryStore):
    """Treats ``failed(reason="timeout")`` as a retry while the policy has attempts left."""

    async def transition(
        self, task_id: str, expected_revision: int, event: Event, authority: Lease | Access
    ) -> Transition:
        if isinstance(event, Failed) and event.reason == "timeout":
            with self._lock:
                row = self._rows.get(task_id)
                current = None if row is None else self._take(task_id, row)
            if current is not None and current.work.retry_policy.allows_retry(
                    current.retry_count):
                event = RetryRequested(event_id=event.event_id, error=event.error,
                                       message=event.message)
        return await super().transition(task_id, expected_revision, event, authority)


class TimeoutOverwritesACancel(MemoryStore):
    """Records a timeout's reason and error even on a task that was cancelled already."""

    async def transition(
        self, task_id: str, expected_revision: int, event: Event, authority: Lease | Access
    ) -> Transition:
        done = await super().transition(task_id, expected_revision, event, authority)
        if isinstance(event, Failed) and event.reason == "timeout" and (
                done.snapshot.status == TaskStatus.CANCELLED):
            with self._lock:
                row = self._rows[task_id]
                timed_out = self._take(task_id, row).model_copy(update={
                    "cancel_reason": CancelReason.TIMEOUT,
                    "error": ErrorInfo(type=event.error, message=event.message),
                })
                self._set(row, timed_out)
        return done


# -- copies and reports ------------------------------------------------------------------------


class _SharesInput(MemoryStore):
    """Keeps the very input object of a snapshot it returned and reads it back as the
    stored input (what a store that caches the objects it hands out does): the caller's
    mutation reaches the stored task."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._shared: dict[str, Snapshot] = {}

    def _share(self, snapshot: Snapshot) -> None:
        self._shared.setdefault(snapshot.id, snapshot)

    def _view(self, task_id: str, row: _Row) -> Snapshot:
        snapshot = super()._view(task_id, row)
        shared = self._shared.get(task_id)
        if shared is None or shared.run_id != snapshot.run_id:
            return snapshot
        work = snapshot.work.model_copy(update={"input": shared.work.input})
        return snapshot.model_copy(update={"work": work})


class ListAliasesStoredData(_SharesInput):
    """``list`` returns snapshots sharing their payload with the stored task."""

    async def list(self, query: TaskQuery) -> builtins.list[Snapshot]:
        page = await super().list(query)
        for snapshot in page:
            self._share(snapshot)
        return page


class ClaimNextAliasesStoredData(_SharesInput):
    """``claim_next`` returns snapshots sharing their payload with the stored task."""

    async def claim_next(self, worker_id: str, lease_for: float, **options: Any
                         ) -> builtins.list[Claim]:
        claims = await super().claim_next(worker_id, lease_for, **options)
        for claim in claims:
            self._share(claim.snapshot)
        return claims


class WorkerSnapshotAliasesStoredData(_SharesInput):
    """``worker_snapshot`` returns a snapshot sharing its payload with the stored task."""

    async def worker_snapshot(self, lease: Lease) -> Snapshot:
        snapshot = await super().worker_snapshot(lease)
        self._share(snapshot)
        return snapshot


def _not_a_skip_report(record: logging.LogRecord) -> bool:
    return "skipped the corrupt record" not in record.getMessage()


def _skip_report_without_operation(record: logging.LogRecord) -> bool:
    """Keep the report, the operation (``reports.corrupt_skipped``'s ``where``) left out."""
    if "skipped the corrupt record" in record.getMessage() and isinstance(record.args, tuple):
        record.args = ("a read", *record.args[1:])
    return True


class CorruptSkipNotReported(MemoryStore):
    """Skips corrupt records in listings, claims and ``reap`` without a word."""

    _filter: Callable[[logging.LogRecord], bool] = staticmethod(_not_a_skip_report)

    @contextmanager
    def _silently(self) -> Iterator[None]:
        logger = logging.getLogger(MemoryStore.__module__)
        logger.addFilter(self._filter)
        try:
            yield
        finally:
            logger.removeFilter(self._filter)

    async def list(self, query: TaskQuery) -> builtins.list[Snapshot]:
        with self._silently():
            return await super().list(query)

    async def claim_next(self, worker_id: str, lease_for: float, **options: Any
                         ) -> builtins.list[Claim]:
        with self._silently():
            return await super().claim_next(worker_id, lease_for, **options)

    async def reap(self, limit: int = 1000) -> builtins.list[str]:
        with self._silently():
            return await super().reap(limit)


class CorruptSkipNamesNoOperation(CorruptSkipNotReported):
    """Reports each skipped corrupt record by its id, once, but says "a read" instead of
    the operation that skipped it (``claim_next``, a listing, ``reap``)."""

    _filter = staticmethod(_skip_report_without_operation)


class TenantArgumentNotChecked(MemoryStore):
    """Reads a ``tenant`` that is not a string as "another tenant" in ``get`` and
    ``history`` (``TaskNotFound``) instead of refusing it."""

    def _visible(
        self, task_id: str, tenant: str | None, now: datetime
    ) -> tuple[_Row, Snapshot]:
        if tenant is not None and not isinstance(tenant, str):
            raise TaskNotFound(task_id)
        return super()._visible(task_id, tenant, now)


class OtherTenantsRecordsDecoded(MemoryStore):
    """Reads the record (and so finds it damaged) before it sees that the reader is of
    another tenant: a corrupt record of another tenant is ``StoreCorrupt``, and another
    tenant's task costs its decoding."""

    def _visible(
        self, task_id: str, tenant: str | None, now: datetime
    ) -> tuple[_Row, Snapshot]:
        self._take(task_id, self._row(task_id))
        return super()._visible(task_id, tenant, now)


class WakeupsOnlyOnCreateAndRelease(MemoryStore):
    """Wakes ``wait_for_work`` on a create or a release only: an answer or a scheduled
    retry leaves the waiters asleep."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._sleepers: list[tuple[frozenset[str], asyncio.Future[bool]]] = []
        self._sleepers_lock = threading.Lock()

    def _wake(self, queue: str) -> None:
        with self._sleepers_lock:
            for queues, future in self._sleepers:
                if queue in queues:
                    future.get_loop().call_soon_threadsafe(_resolve, future)

    async def create(self, new: NewTask, **options: Any) -> Snapshot:
        created = await super().create(new, **options)
        self._wake(created.queue)
        return created

    async def release(self, lease: Lease) -> Snapshot:
        released = await super().release(lease)
        self._wake(released.queue)
        return released

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        entry = (rules.check_queues(queues), asyncio.get_running_loop().create_future())
        with self._sleepers_lock:
            self._sleepers.append(entry)
        try:
            return await asyncio.wait_for(asyncio.shield(entry[1]), timeout)
        except TimeoutError:
            return False
        finally:
            with self._sleepers_lock:
                self._sleepers.remove(entry)


def _resolve(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(True)


# -- clocks ------------------------------------------------------------------------------------


class NowIgnoresTheInjectedClock(MemoryStore):
    """``now()`` reads the wall clock even when a clock was injected."""

    async def now(self) -> datetime:
        return rules.tick(SystemClock().now())


class InstantsRoundedToTheMillisecond(MemoryStore):
    """Rounds its clock to the nearest millisecond instead of truncating it."""

    def _rounded(self) -> datetime:
        return rules.tick(self._clock.now() + timedelta(microseconds=500))

    @contextmanager
    def _locked(self) -> Iterator[datetime]:
        with self._lock:
            yield self._rounded()

    async def now(self) -> datetime:
        return self._rounded()


class _ServerClock:
    """The clock of a database server two seconds ahead of this host (within the skew the
    suite allows, so its ``now()`` passes on its own)."""

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=2)


class WallClockInsteadOfTheStoreClock(MemoryStore):
    """Without an injected clock, answers ``now()`` from the server's clock but stamps
    every instant with this host's wall clock."""

    def __init__(self, *, clock: Clock | None = None, **options: Any) -> None:
        super().__init__(clock=clock, **options)
        self._server: Clock = clock or _ServerClock()

    async def now(self) -> datetime:
        return rules.tick(self._server.now())
