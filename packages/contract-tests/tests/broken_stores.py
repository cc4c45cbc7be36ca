"""Deliberately broken ``MemoryStore`` subclasses: each breaks exactly one rule.

``test_self.py`` runs the contract suite against each of them and checks that the test
meant to catch the defect fails (and that the unmodified ``MemoryStore`` passes it).
Each class overrides one small hook of ``MemoryStore`` (or wraps one operation) so the
rest of the store stays correct.
"""

from __future__ import annotations

import asyncio
import builtins
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tasks_core import Claim, Lease, LeaseLost, NewTask, Snapshot, TaskQuery, TasksError, rules
from tasks_core.events import EventRecord
from tasks_store_memory import MemoryStore
from tasks_store_memory.store import _Row

__all__ = [
    "BatchFencedByItsFirstLease",
    "BatchRoomCountsOneTaskPerTenant",
    "BatchStopsAtFirstRefusal",
    "BatchStoredAtSeveralInstants",
    "CapacityCheckedOutsideTheAtomicStep",
    "ClaimNextIgnoresLiveLeases",
    "ClaimNextIgnoresRetryAt",
    "CorruptRecordBreaksListing",
    "DeliveryLimitIgnored",
    "ExpiredTasksStayVisible",
    "GenerationNotBumped",
    "LastWriterWins",
    "NoReplayCheck",
    "NoTenantFilter",
    "NoTokenCheck",
    "OlderGenerationAccepted",
    "ReleaseConsumesARetry",
    "ReleaseResetsDeliveries",
    "TenantsComparedWithoutCase",
]


class NoReplayCheck(MemoryStore):
    """Forgets applied event ids: a retried call is applied (or refused) again."""

    def _find_event(self, row: _Row, event_id: str) -> int | None:
        return None


class _LaxLeaseStore(MemoryStore):
    """Applies the (broken) ``_lease_check`` hook to ``renew``, ``report_progress`` and
    ``release`` too: the rules functions those call re-check the exact lease, so a lease
    the hook accepts is swapped for the current one first."""

    def _as_current(self, lease: Lease, *, live: bool) -> Lease:
        with self._locked() as now:
            row = self._rows.get(lease.task_id)
            if row is None:
                return lease
            snapshot = self._take(lease.task_id, row)
            self._lease_check(snapshot, row.token, lease, now, require_live=live)
            claim = snapshot.claim
            if claim is None or row.token is None:
                return lease
            return lease.model_copy(
                update={
                    "token": row.token,
                    "generation": claim.generation,
                    "worker_id": claim.worker_id,
                }
            )

    async def renew(self, lease: Lease, lease_for: float) -> Claim:
        return await super().renew(self._as_current(lease, live=True), lease_for)

    async def report_progress(self, lease: Lease, value: float, message: str | None) -> Snapshot:
        current = self._as_current(lease, live=True)
        return await super().report_progress(current, value, message)

    async def release(self, lease: Lease) -> Snapshot:
        return await super().release(self._as_current(lease, live=False))


class NoTokenCheck(_LaxLeaseStore):
    """Checks task, worker and generation but never the lease token."""

    def _lease_check(
        self,
        snapshot: Snapshot,
        token: str | None,
        lease: Lease,
        now: datetime,
        *,
        require_live: bool = True,
    ) -> None:
        trusted = lease.model_copy(update={"token": token})
        super()._lease_check(snapshot, token, trusted, now, require_live=require_live)


class OlderGenerationAccepted(_LaxLeaseStore):
    """Fences on the generation number alone, and with ``<=``: any older lease of the same
    worker passes (no token, no exact generation)."""

    def _lease_check(
        self,
        snapshot: Snapshot,
        token: str | None,
        lease: Lease,
        now: datetime,
        *,
        require_live: bool = True,
    ) -> None:
        claim = snapshot.claim
        if (
            claim is None
            or lease.task_id != snapshot.id
            or lease.worker_id != claim.worker_id
            or lease.generation > claim.generation
        ):
            raise LeaseLost()
        if require_live and not snapshot.lease_live(now):
            raise LeaseLost("The lease has ended or expired")


class GenerationNotBumped(MemoryStore):
    """A new claim reuses the previous claim's generation instead of a higher one."""

    def _start_claim(
        self, snapshot: Snapshot, worker_id: str, lease_for: float, now: datetime, *,
        held: bool = False,
    ) -> tuple[Snapshot, str, Lease | None, EventRecord | None]:
        if snapshot.lease_generation > 0:
            generation = snapshot.lease_generation - 1
            snapshot = snapshot.model_copy(update={"lease_generation": generation})
        return super()._start_claim(snapshot, worker_id, lease_for, now, held=held)


class NoTenantFilter(MemoryStore):
    """Ignores the tenant of reads and listings."""

    def _tenant_matches(self, snapshot: Snapshot, tenant: str | None) -> bool:
        return True


class TenantsComparedWithoutCase(MemoryStore):
    """Reads tenant ``acme`` as ``Acme`` (what a case-insensitive collation does)."""

    def _tenant_matches(self, snapshot: Snapshot, tenant: str | None) -> bool:
        return tenant is None or snapshot.tenant.casefold() == tenant.casefold()


class BatchRoomCountsOneTaskPerTenant(MemoryStore):
    """Checks each tenant's room in a batch for one of its tasks, not for its whole share
    (``active + 1 > cap``)."""

    _shares: Counter[str] = Counter()

    async def create_many(self, news: Sequence[NewTask], **options: Any) -> list[Snapshot]:
        self._shares = Counter(new.tenant for new in news)
        try:
            return await super().create_many(news, **options)
        finally:
            self._shares = Counter()

    def _active_tasks(self, tenant: str, now: datetime) -> int:
        return super()._active_tasks(tenant, now) - max(0, self._shares[tenant] - 1)


class BatchStoredAtSeveralInstants(MemoryStore):
    """Stores a batch task by task, each at the clock as it reads then."""

    async def create_many(self, news: Sequence[NewTask], **options: Any) -> list[Snapshot]:
        return [await self.create(new) for new in news]


class ExpiredTasksStayVisible(MemoryStore):
    """Shows expired tasks in reads and listings until they are reaped."""

    def _expired(self, snapshot: Snapshot, now: datetime) -> bool:
        return False


class CapacityCheckedOutsideTheAtomicStep(MemoryStore):
    """Checks the capacity, yields to other tasks, then inserts: concurrent creators all
    pass the check. (Everything else, error precedence included, is unchanged.)"""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._checked_before: set[str] = set()

    def _check_capacity(self, new: NewTask, now: datetime, replacing: bool) -> None:
        if new.id not in self._checked_before:
            super()._check_capacity(new, now, replacing)

    async def create(
        self, new: NewTask, *, replace: Snapshot | None = None, transaction: Any = None
    ) -> Snapshot:
        if transaction is not None or replace is not None or new.id in self._rows:
            return await super().create(new, replace=replace, transaction=transaction)
        with self._locked() as now:
            super()._check_capacity(new, now, replacing=False)
        await asyncio.sleep(0)  # the window: other creators pass the same check
        self._checked_before.add(new.id)
        try:
            return await super().create(new)
        finally:
            self._checked_before.discard(new.id)


class LastWriterWins(MemoryStore):
    """Never checks ``expected_revision``: the last writer wins."""

    def _check_revision(self, snapshot: Snapshot, expected_revision: int, now: datetime) -> None:
        return None


class ClaimNextIgnoresLiveLeases(MemoryStore):
    """``claim_next`` hands out a task that is still leased by a live worker."""

    def _claimable(self, snapshot: Snapshot, now: datetime) -> bool:
        unleased = snapshot.model_copy(update={"claim": None})
        return super()._claimable(unleased, now)


class ClaimNextIgnoresRetryAt(MemoryStore):
    """``claim_next`` serves a retry before its ``retry_at``."""

    def _claimable(self, snapshot: Snapshot, now: datetime) -> bool:
        due = snapshot.model_copy(update={"retry_at": None})
        return super()._claimable(due, now)


class ReleaseResetsDeliveries(MemoryStore):
    """``release`` gives the delivery back (``deliveries`` goes down)."""

    async def release(self, lease: Lease) -> Snapshot:
        released = await super().release(lease)
        fewer = max(0, released.deliveries - 1)
        with self._lock:
            row = self._rows[lease.task_id]
            stored = self._take(lease.task_id, row)
            self._set(row, stored.model_copy(update={"deliveries": fewer}))
        return released.model_copy(update={"deliveries": fewer})


class ReleaseConsumesARetry(MemoryStore):
    """``release`` counts as a retry (``retry_count`` goes up)."""

    async def release(self, lease: Lease) -> Snapshot:
        released = await super().release(lease)
        more = released.retry_count + 1
        with self._lock:
            row = self._rows[lease.task_id]
            stored = self._take(lease.task_id, row)
            self._set(row, stored.model_copy(update={"retry_count": more}))
        return released.model_copy(update={"retry_count": more})


class DeliveryLimitIgnored(MemoryStore):
    """Claims past ``work.max_deliveries`` run the task again instead of failing it."""

    def _start_claim(
        self, snapshot: Snapshot, worker_id: str, lease_for: float, now: datetime, *,
        held: bool = False,
    ) -> tuple[Snapshot, str, Lease | None, EventRecord | None]:
        work = snapshot.work
        unlimited = snapshot.model_copy(
            update={"work": work.model_copy(update={"max_deliveries": 100_000})}
        )
        new, token, lease, failure = super()._start_claim(unlimited, worker_id, lease_for, now,
                                                          held=held)
        return new.model_copy(update={"work": work}), token, lease, failure


class CorruptRecordBreaksListing(MemoryStore):
    """A listing decodes every record first, so one ``StoreCorrupt`` fails the page."""

    async def list(self, query: TaskQuery) -> builtins.list[Snapshot]:
        with self._lock:
            for task_id, row in self._rows.items():
                self._take(task_id, row)
        return await super().list(query)


class BatchStopsAtFirstRefusal(MemoryStore):
    """``transition_many`` gives up at the first refused item: the rest never apply."""

    async def transition_many(self, items: Any) -> builtins.list[Any]:
        items = rules.check_batch(items)
        results: builtins.list[Any] = []
        for item in items:
            try:
                results.append(await self.transition(*item))
            except TasksError as refusal:
                results.append(refusal)
                results += [refusal] * (len(items) - len(results))
                break
        return results


class BatchFencedByItsFirstLease(MemoryStore):
    """``transition_many`` checks the first item's lease and trusts it for the others."""

    async def transition_many(self, items: Any) -> builtins.list[Any]:
        items = rules.check_batch(items)
        first: Lease | None = None
        results: builtins.list[Any] = []
        for task_id, revision, event, authority in items:
            if isinstance(authority, Lease):
                if first is not None:
                    with self._lock:
                        row = self._rows[task_id]
                        claim = self._take(task_id, row).claim
                        if claim is not None and row.token is not None:
                            authority = authority.model_copy(update={
                                "token": row.token, "generation": claim.generation,
                                "worker_id": claim.worker_id,
                                "expires_at": claim.expires_at,
                            })
                first = first or authority
            try:
                results.append(await self.transition(task_id, revision, event, authority))
            except TasksError as refusal:
                results.append(refusal)
        return results

