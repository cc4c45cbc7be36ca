"""Real concurrency: N writers, N claimers, N creators.

Each race runs twice: as ``asyncio.gather`` over N coroutines on the test's loop, and from
N OS threads released together by a barrier, each calling into the store's loop (the
situation of a sync facade serving a threaded web server).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from functools import partial
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from tasks_core import (
    Cancelled,
    Completed,
    Owner,
    RevisionConflict,
    Snapshot,
    TaskExists,
    TaskStatus,
    TaskStore,
    Transition,
    WatcherAdded,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    ALICE,
    SYSTEM,
    access,
    created_and_claimed,
    new_task,
    task_id,
)

N = 16
Call = Callable[[], Coroutine[Any, Any, Any]]
Runner = Callable[[Sequence[Call]], Awaitable[list[Any]]]


async def in_gather(calls: Sequence[Call]) -> list[Any]:
    """Run every call concurrently on this loop; exceptions are returned, not raised."""
    return list(await asyncio.gather(*(call() for call in calls), return_exceptions=True))


async def in_threads(calls: Sequence[Call]) -> list[Any]:
    """Start every call from its own OS thread, all released at once by a barrier;
    exceptions are returned, not raised."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)
    limiter = anyio.CapacityLimiter(len(calls))

    def run(index: int) -> None:
        barrier.wait(timeout=60)
        try:
            results[index] = anyio.from_thread.run(calls[index])
        except Exception as exc:
            results[index] = exc

    async with anyio.create_task_group() as group:
        for index in range(len(calls)):
            group.start_soon(partial(anyio.to_thread.run_sync, run, index, limiter=limiter))
    return results


RUNNERS = pytest.mark.parametrize("run", [in_gather, in_threads], ids=["gather", "threads"])


def outcomes(results: list[Any]) -> list[str]:
    """``applied``/``duplicate``/``unchanged`` for transitions, else the exception type."""
    return sorted(r.outcome if isinstance(r, Transition) else type(r).__name__ for r in results)


class RaceContract(ContractBase):
    """Real concurrency: N writers, N claimers, N creators."""

    @RUNNERS
    async def test_concurrent_writers_have_exactly_one_winner(
        self, store: TaskStore, run: Runner
    ) -> None:
        """N writers with different events at one revision MUST produce exactly one
        ``applied`` and N−1 ``RevisionConflict``; the history holds the winner alone.

        Troubleshooting: the revision check and the write must be one atomic step: a
        conditional update (``WHERE revision = :expected``) or a row lock held from read
        to write (``SELECT … FOR UPDATE``); read-check-write without it lets two win.
        """
        created = await store.create(new_task())
        calls = [
            partial(
                store.transition,
                created.id,
                0,
                WatcherAdded(event_id=f"grant-{n}", principal=Owner(f"user{n}")),
                access(SYSTEM),
            )
            for n in range(N)
        ]
        results = await run(calls)
        assert sorted(["applied"] + ["RevisionConflict"] * (N - 1)) == outcomes(results)
        winner = next(r for r in results if isinstance(r, Transition))
        history = await store.history(created.id, tenant="default")
        assert [winner.record] == history
        stored = await store.get(created.id, tenant="default")
        assert (1, winner.snapshot.watchers) == (stored.revision, stored.watchers)
        for loser in results:
            if isinstance(loser, RevisionConflict):
                assert 1 == loser.current.revision

    @RUNNERS
    async def test_concurrent_identical_events_apply_once(
        self, store: TaskStore, run: Runner
    ) -> None:
        """N concurrent copies of one event (same id, same content) MUST apply once; every
        other copy MUST answer ``duplicate`` with the same revision and ``committed_at``.

        Troubleshooting: the event-id check must see events committed by concurrent
        writers (check it under the same lock or unique index as the write; a unique
        (task id, event id) index turns a lost race into a replay, not an error).
        """
        created = await store.create(new_task())
        cancel = Cancelled(event_id="cancel-once")
        calls = [partial(store.transition, created.id, 0, cancel, access(ALICE)) for _ in range(N)]
        results = await run(calls)
        assert sorted(["applied"] + ["duplicate"] * (N - 1)) == outcomes(results)
        records = {(r.record.revision, r.record.committed_at) for r in results}
        assert 1 == len(records)
        assert 1 == len(await store.history(created.id, tenant="default"))
        assert 1 == (await store.get(created.id, tenant="default")).revision

    @RUNNERS
    async def test_concurrent_creators_of_one_id_have_one_winner(
        self, store: TaskStore, run: Runner
    ) -> None:
        """N concurrent ``create`` calls for one id MUST create it once; the N−1 others MUST
        raise ``TaskExists`` carrying the winner's run.

        Troubleshooting: rely on a unique key for the id (or an insert under a lock), not
        on "read, then insert if absent".
        """
        same = task_id("race")
        calls = [partial(store.create, new_task(same, input={"n": n})) for n in range(N)]
        results = await run(calls)
        created = [r for r in results if isinstance(r, Snapshot)]
        refused = [r for r in results if isinstance(r, TaskExists)]
        assert (1, N - 1) == (len(created), len(refused))
        assert {created[0].run_id} == {r.current.run_id for r in refused}
        assert created[0] == await store.get(same, tenant="default")

    @RUNNERS
    async def test_completion_racing_a_cancel_has_one_winner(
        self, store: TaskStore, run: Runner
    ) -> None:
        """When the lease holder completes while the owner cancels at the same revision,
        exactly one MUST be applied and the other MUST get ``RevisionConflict``; the
        stored status MUST be the winner's.

        Troubleshooting: worker and request writes go through the same revision guard;
        a separate "complete" path that skips it lets a cancel be overwritten.
        """
        tasks = [await created_and_claimed(store) for _ in range(N // 2)]
        calls: list[Call] = []
        for snapshot, lease in tasks:
            calls.append(partial(store.transition, snapshot.id, 0, Completed(event_id="d"), lease))
            calls.append(
                partial(store.transition, snapshot.id, 0, Cancelled(event_id="c"), access(ALICE))
            )
        results = await run(calls)
        for index, (snapshot, _) in enumerate(tasks):
            pair = results[2 * index : 2 * index + 2]
            assert sorted(["applied", "RevisionConflict"]) == outcomes(pair)
            winner = next(r for r in pair if isinstance(r, Transition))
            stored = await store.get(snapshot.id, tenant="default")
            assert winner.snapshot.status == stored.status
            assert stored.status in (TaskStatus.COMPLETED, TaskStatus.CANCELLED)
