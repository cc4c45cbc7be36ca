"""Races that catch a store which checks before it acts, run from warm connections.

A race started on a cold store is no race: the first calls each open a connection, one
after another, and that serialises them — a store that checks an exclusive queue, a
capacity or a revision *before* its write (instead of in the same atomic step) passes. So
each race first opens the connections it uses, then releases every racer at once:
:func:`warm` (coroutines on the test's loop, over the pool the reads opened) or
:func:`in_threads` (OS threads, each on its own loop and connection, behind a barrier).
The self-tests prove every race here with a broken store that checks, yields, then acts.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from functools import partial
from typing import Any

import anyio.to_thread
import pytest
from tasks_core import (
    CapacityExceeded,
    Claim,
    ManualClock,
    Owner,
    Snapshot,
    TaskQuery,
    TaskStatus,
    TaskStore,
    Transition,
    WatcherAdded,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import ALICE, LEASE_S, MALLORY, SYSTEM, access, new_task

N = 8
"""Racers in every race (a pool of 8 connections, or 8 threads)."""
ROUNDS = 3
"""Rounds of concurrent reads that open the connections before a race."""
Call = Callable[[], Coroutine[Any, Any, Any]]
Racer = Callable[[TaskStore, Sequence[Call]], Awaitable[list[Any]]]
MakeStore = Callable[..., Awaitable[TaskStore]]


async def warm_up(store: TaskStore, width: int) -> None:
    """Open up to ``width`` connections on this event loop: ``ROUNDS`` rounds of ``width``
    concurrent reads (a pool that opens one connection at a time grows a little every
    round, and keeps them)."""
    for _ in range(ROUNDS):
        await asyncio.gather(
            *(store.list(TaskQuery(tenant=None, limit=1)) for _ in range(width))
        )


async def warm(store: TaskStore, calls: Sequence[Call]) -> list[Any]:
    """Warm the pool, then start every call in the same turn of this event loop;
    exceptions are returned, not raised."""
    await warm_up(store, len(calls))
    gate = asyncio.Event()

    async def racer(call: Call) -> Any:
        await gate.wait()
        return await call()

    racing = [asyncio.ensure_future(racer(call)) for call in calls]
    await asyncio.sleep(0)  # every racer is waiting at the gate
    gate.set()
    return list(await asyncio.gather(*racing, return_exceptions=True))


async def in_threads(store: TaskStore, calls: Sequence[Call]) -> list[Any]:
    """Run each call on its own OS thread and event loop, released together by a barrier
    once every thread has opened its connection; exceptions are returned, not raised."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    async def racer(index: int) -> None:
        try:
            await warm_up(store, 1)
        finally:
            await asyncio.to_thread(barrier.wait, 60)
        try:
            results[index] = await calls[index]()
        except Exception as exc:
            results[index] = exc

    def thread(index: int) -> None:
        asyncio.run(racer(index))

    limiter = anyio.CapacityLimiter(len(calls))
    async with anyio.create_task_group() as group:
        for index in range(len(calls)):
            group.start_soon(partial(anyio.to_thread.run_sync, thread, index, limiter=limiter))
    return results


RACERS = pytest.mark.parametrize("race", [warm, in_threads], ids=["warm", "threads"])


def _claims(results: list[Any]) -> list[Claim]:
    """Every claim the racing ``claim_next`` calls returned (none of them may fail)."""
    failed = [r for r in results if isinstance(r, BaseException)]
    assert [] == failed, "a racing claim_next failed"
    return [claim for batch in results for claim in batch]


async def _serial(store: TaskStore, clock: ManualClock, count: int) -> list[str]:
    """``count`` tasks on queue ``serial``, a millisecond apart: their ids, oldest first."""
    ids = []
    for _ in range(count):
        ids.append((await store.create(new_task(queue="serial"))).id)
        clock.advance(0.001)
    return ids


class WarmRaceContract(ContractBase):
    """Races from warm connections: exclusive queues, capacity, claims and transitions."""

    @RACERS
    async def test_racing_exclusive_claims_hold_one_lease(
        self, store: TaskStore, clock: ManualClock, race: Racer
    ) -> None:
        """N workers racing ``claim_next(exclusive=[q])`` on an idle exclusive queue MUST
        get one lease between them — on the oldest task — and every other racer nothing.

        Troubleshooting: the "no live lease on this queue" check and the claim are one
        atomic step (a lock on a per-queue row held to the commit, ``SELECT … FOR UPDATE``
        of the queue's leased rows, or a conditional insert into a "queue busy" table).
        Checking first and claiming after passes every test made one call at a time and
        hands the queue to every racer at once.
        """
        if not store.capabilities.exclusive_queues:
            pytest.skip("store capability 'exclusive_queues' is off")
        ids = await _serial(store, clock, N)
        calls: list[Call] = [
            partial(store.claim_next, f"w{n}", LEASE_S, queues=["serial"], limit=1,
                    exclusive=["serial"])
            for n in range(N)
        ]
        claims = _claims(await race(store, calls))
        assert [ids[0]] == [claim.snapshot.id for claim in claims]
        running = await store.list(
            TaskQuery(tenant=None, statuses=frozenset({TaskStatus.RUNNING}))
        )
        assert [ids[0]] == [snapshot.id for snapshot in running]

    @RACERS
    async def test_racing_claim_next_never_shares_a_task(
        self, store: TaskStore, race: Racer
    ) -> None:
        """N workers racing ``claim_next(limit=2)`` over N tasks MUST never get the same
        task twice; what they leave, one more call claims, so each task is claimed once.

        Troubleshooting: pick and lease each task in one atomic step (``FOR UPDATE SKIP
        LOCKED`` then the update in the same transaction, or a conditional update on the
        lease generation whose row count says who won); reading candidates first and
        leasing them after hands a task to every racer that read it.
        """
        ids = {(await store.create(new_task())).id for _ in range(N)}
        calls: list[Call] = [
            partial(store.claim_next, f"w{n}", LEASE_S, queues=["default"], limit=2)
            for n in range(N)
        ]
        claimed = [claim.snapshot.id for claim in _claims(await race(store, calls))]
        assert {} == {task: count for task, count in Counter(claimed).items() if count > 1}
        rest = await store.claim_next("last", LEASE_S, queues=["default"], limit=N)
        assert sorted(ids) == sorted(claimed + [claim.snapshot.id for claim in rest])

    @pytest.mark.parametrize("limit", ["max_tasks", "max_active_tasks_per_scope"])
    @RACERS
    async def test_racing_creators_stay_within_the_capacity(
        self, make_store: MakeStore, race: Racer, limit: str
    ) -> None:
        """N creators racing against a limit of 3 (with one slot already taken, in
        another tenant for ``max_tasks``) MUST yield exactly 2 new tasks and N−2
        ``CapacityExceeded``, and the store MUST hold exactly those tasks.

        Troubleshooting: count and insert in one atomic step (a serializable transaction,
        a lock on a per-tenant counter row, a conditional insert); a count read before the
        insert admits every racer that read it.
        """
        store = await make_store(**{limit: 3})
        first = await store.create(new_task(owner=MALLORY if limit == "max_tasks" else ALICE))
        calls: list[Call] = [partial(store.create, new_task()) for _ in range(N)]
        results = await race(store, calls)
        created = sorted(r.id for r in results if isinstance(r, Snapshot))
        refused = [r for r in results if isinstance(r, CapacityExceeded)]
        assert (2, N - 2) == (len(created), len(refused)), results
        assert {limit} == {r.limit for r in refused}
        stored = [s.id for s in await store.list(TaskQuery(tenant=None))]
        assert sorted([first.id, *created]) == stored

    @RACERS
    async def test_racing_writers_have_exactly_one_winner(
        self, store: TaskStore, race: Racer
    ) -> None:
        """N writers racing different events at one revision MUST produce exactly one
        ``applied`` and N−1 ``RevisionConflict``; the history holds the winner alone.

        Troubleshooting: the revision check and the write are one statement (``UPDATE …
        WHERE revision = :expected``, checking the row count) or happen under a row lock
        held from the read to the commit; a store that checks the revision, then writes,
        lets every racer that checked win.
        """
        created = await store.create(new_task())
        calls: list[Call] = [
            partial(store.transition, created.id, 0,
                    WatcherAdded(event_id=f"grant-{n}", principal=Owner(f"user{n}")),
                    access(SYSTEM))
            for n in range(N)
        ]
        results = await race(store, calls)
        outcomes = sorted(r.outcome if isinstance(r, Transition) else type(r).__name__
                          for r in results)
        assert sorted(["applied"] + ["RevisionConflict"] * (N - 1)) == outcomes
        [winner] = [r for r in results if isinstance(r, Transition)]
        assert [winner.record] == await store.history(created.id, tenant=None)
        assert 1 == (await store.get(created.id, tenant=None)).revision
