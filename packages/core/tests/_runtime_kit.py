"""Helpers of the runtime tests: principals, apps on the memory store, store wrappers."""

from __future__ import annotations

import asyncio
import numbers
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from tasks_core import (
    App,
    Claim,
    Event,
    Lease,
    ManualClock,
    Owner,
    RetryPolicy,
    Snapshot,
    StoreCapabilities,
    TaskContext,
    TasksError,
    TaskStatus,
    TaskStore,
    Transition,
    Worker,
)
from tasks_store_memory import MemoryStore


class Count:
    """An integer that is not an ``int`` (as a NumPy integer is not)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __int__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"Count({self.value})"


numbers.Integral.register(Count)

ALICE = Owner("alice")
BOB = Owner("bob")
CAROL = Owner("carol")
MALLORY = Owner("mallory", tenant="evil")

TIMEOUT = 10.0
"""Upper bound of every wait in these tests: a bound for a broken build, never a timing."""

LEASED = frozenset({TaskStatus.RUNNING, TaskStatus.CLAIMED})
"""A live lease: started (``running``) or held ahead of a slot (``claimed``)."""


def make_app(clock: ManualClock | None = None, *, store: Any = None, **options: Any) -> App:
    """An App on a fresh memory store driven by ``clock``."""
    return App(store=store or MemoryStore(clock=clock or ManualClock()), **options)


def reports_app(**options: Any) -> App:
    """``make_app(**options)`` with the task ``report`` (queue ``reports``, 3 attempts 1 s
    apart, a 12 s timeout, 7 deliveries) that returns its ``month``."""
    app = make_app(**options)

    @app.task(queue="reports", retry=RetryPolicy.fixed(1.0, attempts=3), timeout=12,
              max_deliveries=7)
    async def report(ctx: TaskContext, month: str = "x") -> str:
        return month

    return app


def fast_worker(app: App, **options: Any) -> Worker:
    """A worker that polls often and keeps everything short (no reaper)."""
    settings: dict[str, Any] = {
        "poll_interval": 0.02,
        "min_poll": 0.005,
        "input_park": 5.0,
        "progress_interval": 0.01,
        "reap_interval": None,
        "lease_for": 30.0,
    }
    settings.update(options)
    return Worker(app, **settings)


class DelegatingStore:
    """Forwards everything to ``inner``; subclasses override what they watch."""

    def __init__(self, inner: TaskStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def capabilities(self) -> StoreCapabilities:
        return self.inner.capabilities


@dataclass
class Record:
    """One ``transition`` call and what became of it."""

    task_id: str
    event: Event
    authority: Any
    result: Transition | None
    error: BaseException | None


class RecordingStore(DelegatingStore):
    """Records every ``transition`` — and every item of ``transition_many`` — (and
    ``claim_next``/``wait_for_work`` call)."""

    def __init__(self, inner: TaskStore) -> None:
        super().__init__(inner)
        self.records: list[Record] = []
        self.groups: list[int] = []
        """Sizes of the ``transition_many`` calls (group commits)."""
        self.claim_limits: list[int] = []
        self.wakeup_waits = 0
        self.idle = asyncio.Event()
        self._changed = asyncio.Condition()

    async def transition(
        self, task_id: str, expected_revision: int, event: Event, authority: Any
    ) -> Transition:
        try:
            result = await self.inner.transition(task_id, expected_revision, event, authority)
        except BaseException as exc:
            await self._add(Record(task_id, event, authority, None, exc))
            raise
        await self._add(Record(task_id, event, authority, result, None))
        return result

    async def transition_many(
        self, items: Sequence[tuple[str, int, Event, Any]]
    ) -> list[Transition | TasksError]:
        """Records each item like a ``transition`` (the worker's group commit)."""
        try:
            results = await self.inner.transition_many(items)
        except BaseException as exc:
            for task_id, _, event, authority in items:
                await self._add(Record(task_id, event, authority, None, exc))
            raise
        self.groups.append(len(items))
        for (task_id, _, event, authority), result in zip(items, results, strict=True):
            if isinstance(result, Transition):
                await self._add(Record(task_id, event, authority, result, None))
            else:
                await self._add(Record(task_id, event, authority, None, result))
        return results

    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
        start: int | None = None,
    ) -> list[Claim]:
        self.claim_limits.append(limit)
        return await self.inner.claim_next(worker_id, lease_for, queues=queues, limit=limit,
                                           exclusive=exclusive, start=start)

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        self.wakeup_waits += 1
        self.idle.set()
        return await self.inner.wait_for_work(queues, timeout)

    async def _add(self, record: Record) -> None:
        async with self._changed:
            self.records.append(record)
            self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[Record], bool]) -> Record:
        """The first record matching ``predicate`` (waiting for it if need be)."""
        async with self._changed:
            while True:
                for record in self.records:
                    if predicate(record):
                        return record
                await asyncio.wait_for(self._changed.wait(), TIMEOUT)


class GateStore(DelegatingStore):
    """While ``armed``, ``claim_next`` claims and then stops at a gate before returning the
    claims: the test decides when the worker gets them."""

    def __init__(self, inner: TaskStore) -> None:
        super().__init__(inner)
        self.armed = False
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
        start: int | None = None,
    ) -> list[Claim]:
        claims = await self.inner.claim_next(worker_id, lease_for, queues=queues, limit=limit,
                                             exclusive=exclusive, start=start)
        if self.armed and claims:
            self.armed = False
            self.entered.set()
            await self.gate.wait()
        return claims


class CapabilityStore(DelegatingStore):
    """The same store, declaring other capabilities (features behind an off flag raise)."""

    def __init__(self, inner: TaskStore, **flags: bool) -> None:
        super().__init__(inner)
        self._caps = inner.capabilities.model_copy(update=flags)

    @property
    def capabilities(self) -> StoreCapabilities:
        return self._caps

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        from tasks_core import CapabilityNotSupported

        if not self._caps.wakeups:
            raise CapabilityNotSupported("no wakeups")
        return await self.inner.wait_for_work(queues, timeout)


async def until(
    app: App, task_id: str, owner: Owner, check: Callable[[Snapshot], bool]
) -> Snapshot:
    """Re-read ``task_id`` on every change until ``check`` holds (bounded by ``TIMEOUT``;
    finished tasks too, unlike ``watch``)."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            version = app.notices.changes.version
            snapshot = await app.get(task_id, owner)
            if check(snapshot):
                return snapshot
            await app.notices.changes.wait(version, 0.01)


def lease_of(record: Record) -> Lease:
    """The lease a recorded worker transition was sent with."""
    assert isinstance(record.authority, Lease)
    return record.authority
