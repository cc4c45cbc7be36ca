"""A store wrapper for worker processes: every claim, lease write and release is written to
the process's ledger the moment the store answers.

The worker runtime is the real one (``tasks worker``); only its view of the store is
wrapped, so the ledger says what the store told this worker — which claims it got, which
of its completions were applied and which were refused (``LeaseLost``: fenced off). The
checker compares that with what the store kept.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from tasks_core import (
    Access,
    Claim,
    Event,
    EventRecord,
    Lease,
    NewTask,
    Snapshot,
    StoreCapabilities,
    TaskQuery,
    TasksError,
    TaskStatus,
    TaskStore,
    Transition,
)
from tasks_core.storekit import QueueLimits

from tasks_contract_tests.stress._ledger import Ledger

__all__ = ["RecordingStore"]


class RecordingStore:
    """``TaskStore`` that delegates to ``inner`` and records the worker's side of it.

    Args:
        inner: the real store (closed by :meth:`aclose`).
        ledger: this process's ledger.
    """

    def __init__(self, inner: TaskStore, ledger: Ledger) -> None:
        self.inner = inner
        self.ledger = ledger

    def _claimed(self, claims: Sequence[Claim]) -> None:
        for snapshot, lease in claims:
            recovered = snapshot.claim is not None and snapshot.claim.recovered
            self.ledger.record("claim", snapshot.id, delivery=snapshot.deliveries,
                               generation=lease.generation, nonce=lease.worker_id,
                               detail="recovered" if recovered else None)

    @property
    def capabilities(self) -> StoreCapabilities:
        """The inner store's capabilities."""
        return self.inner.capabilities

    async def now(self) -> datetime:
        """See :meth:`TaskStore.now`."""
        return await self.inner.now()

    async def create(
        self, new: NewTask, *, replace: Snapshot | None = None, transaction: Any = None
    ) -> Snapshot:
        """See :meth:`TaskStore.create`."""
        if transaction is None:
            return await self.inner.create(new, replace=replace)
        return await self.inner.create(new, replace=replace, transaction=transaction)

    async def create_many(
        self, news: Sequence[NewTask], *, transaction: Any = None
    ) -> builtins.list[Snapshot]:
        """See :meth:`TaskStore.create_many`."""
        if transaction is None:
            return await self.inner.create_many(news)
        return await self.inner.create_many(news, transaction=transaction)

    async def get(self, task_id: str, *, tenant: str | None) -> Snapshot:
        """See :meth:`TaskStore.get`."""
        return await self.inner.get(task_id, tenant=tenant)

    async def list(self, query: TaskQuery) -> builtins.list[Snapshot]:
        """See :meth:`TaskStore.list`."""
        return await self.inner.list(query)

    async def counts(self, *, tenant: str | None) -> builtins.dict[tuple[str, TaskStatus], int]:
        """See :meth:`TaskStore.counts`."""
        return await self.inner.counts(tenant=tenant)

    async def history(self, task_id: str, *, tenant: str | None) -> builtins.list[EventRecord]:
        """See :meth:`TaskStore.history`."""
        return await self.inner.history(task_id, tenant=tenant)

    async def transition(
        self, task_id: str, expected_revision: int, event: Event, authority: Lease | Access
    ) -> Transition:
        """See :meth:`TaskStore.transition`; lease events are recorded with their outcome."""
        if not isinstance(authority, Lease):
            return await self.inner.transition(task_id, expected_revision, event, authority)
        try:
            result = await self.inner.transition(task_id, expected_revision, event, authority)
        except Exception as exc:
            self._wrote(event, authority, exc)
            raise
        self._wrote(event, authority, result)
        return result

    async def transition_many(
        self, items: Sequence[tuple[str, int, Event, Lease | Access]]
    ) -> builtins.list[Transition | TasksError]:
        """See :meth:`TaskStore.transition_many`; lease events are recorded one by one."""
        try:
            results = await self.inner.transition_many(items)
        except Exception as exc:
            for _, _, event, authority in items:
                if isinstance(authority, Lease):
                    self._wrote(event, authority, exc)
            raise
        for (_, _, event, authority), result in zip(items, results, strict=False):
            if isinstance(authority, Lease):
                self._wrote(event, authority, result)
        return results

    def _wrote(self, event: Event, lease: Lease, result: Transition | BaseException) -> None:
        if isinstance(result, BaseException):
            self.ledger.record("write", lease.task_id, generation=lease.generation,
                               nonce=event.event_id, outcome=type(result).__name__,
                               detail=event.kind)
            return
        self.ledger.record("write", lease.task_id, generation=lease.generation,
                           delivery=result.snapshot.deliveries, nonce=event.event_id,
                           outcome=result.outcome, detail=event.kind)

    async def claim(self, task_id: str, worker_id: str, lease_for: float) -> Claim:
        """See :meth:`TaskStore.claim`."""
        claim = await self.inner.claim(task_id, worker_id, lease_for)
        self._claimed([claim])
        return claim

    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
        start: int | None = None,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> builtins.list[Claim]:
        """See :meth:`TaskStore.claim_next`."""
        options = {} if limits is None else {"limits": limits}  # an older store has none
        claims = await self.inner.claim_next(worker_id, lease_for, queues=queues, limit=limit,
                                             exclusive=exclusive, start=start, **options)
        self._claimed(claims)
        return claims

    async def renew(self, lease: Lease, lease_for: float) -> Claim:
        """See :meth:`TaskStore.renew`."""
        return await self.inner.renew(lease, lease_for)

    async def report_progress(self, lease: Lease, value: float, message: str | None) -> Snapshot:
        """See :meth:`TaskStore.report_progress`."""
        return await self.inner.report_progress(lease, value, message)

    async def release(self, lease: Lease) -> Snapshot:
        """See :meth:`TaskStore.release`; recorded with its outcome."""
        try:
            snapshot = await self.inner.release(lease)
        except Exception as exc:
            self.ledger.record("release", lease.task_id, generation=lease.generation,
                               outcome=type(exc).__name__)
            raise
        self.ledger.record("release", lease.task_id, generation=lease.generation, outcome="ok")
        return snapshot

    async def worker_snapshot(self, lease: Lease) -> Snapshot:
        """See :meth:`TaskStore.worker_snapshot`."""
        return await self.inner.worker_snapshot(lease)

    async def delete(self, task_id: str, *, expected_revision: int) -> None:
        """See :meth:`TaskStore.delete`."""
        await self.inner.delete(task_id, expected_revision=expected_revision)

    async def reap(self, limit: int = 1000) -> builtins.list[str]:
        """See :meth:`TaskStore.reap`."""
        return await self.inner.reap(limit)

    async def next_available(self, queues: Sequence[str]) -> datetime | None:
        """See :meth:`TaskStore.next_available`."""
        return await self.inner.next_available(queues)

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """See :meth:`TaskStore.wait_for_work`."""
        return await self.inner.wait_for_work(queues, timeout)

    async def wait_for_cancels(self, task_ids: Collection[str], timeout: float) -> set[str]:
        """See :meth:`TaskStore.wait_for_cancels`."""
        return await self.inner.wait_for_cancels(task_ids, timeout)

    async def aclose(self) -> None:
        """Close the inner store."""
        await self.inner.aclose()
