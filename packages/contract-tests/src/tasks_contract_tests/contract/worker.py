"""The runtime's worker on the store: what ``tasks worker`` does to it, end to end.

These run a real :class:`~tasks_core.Worker` (batched claims, group commit where
the store has ``batch_transitions``, claims held ahead with ``prefetch``) against the
store under test, on the injected clock (leases never lapse here), and check what the
store ends up holding. They wait for conditions (polling the store, bounded), never for
a fixed time.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Literal

import pytest
from tasks_core import App, ManualClock, TaskContext, TaskStatus, TaskStore

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import ALICE, LEASE_S, submitted_in_order

TASKS = 24
WAIT_S = 20.0
"""The longest any condition is waited for (a failure, not a pause)."""
POLL_S = 0.005
FAST: dict[str, Any] = {
    "poll_interval": 0.02, "min_poll": 0.005, "reap_interval": None, "lease_for": LEASE_S,
}
"""Worker options: poll often (a store without wakeups), no reaper."""


async def _claimed(app: App, task_id: str) -> bool:
    """Whether ``task_id`` holds a live lease (started: ``running``; held: ``claimed``)."""
    return (await app.get(task_id, ALICE)).status in (TaskStatus.RUNNING, TaskStatus.CLAIMED)


async def _reads(app: App, task_id: str, status: TaskStatus) -> bool:
    return (await app.get(task_id, ALICE)).status == status


async def _until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait until ``condition()`` holds, polling; fail after ``WAIT_S``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not await condition():
        if loop.time() > deadline:
            pytest.fail(f"gave up waiting: {what}")
        await asyncio.sleep(POLL_S)


class WorkerContract(ContractBase):
    """The worker on the store: each task run once and its end recorded; claims held
    ahead started oldest first and given back unstarted at shutdown."""

    @pytest.mark.parametrize("prefetch", [0, 3, "auto"])
    async def test_a_worker_runs_every_task_once_and_records_its_end(
        self, store: TaskStore, prefetch: int | Literal["auto"]
    ) -> None:
        """A worker (concurrency 4; ``prefetch`` 0, 3 and ``"auto"``, the default: ahead
        while runs are short) MUST run each submitted task exactly once and leave it
        ``completed`` with its handler's result, one delivery, and exactly one history
        entry, the completion.

        Troubleshooting: a task run twice means a claim handed out a task another claim
        held; a missing or doubled history entry means the completion's write (one
        ``transition`` or a group of them in ``transition_many``) is not atomic.
        """
        app = App(store=store)
        ran: Counter[str] = Counter()

        @app.task(name="double")
        async def double(ctx: TaskContext, n: int) -> int:
            ran[ctx.task_id] += 1
            return n * 2

        async with app:
            ids = [(await app.submit(double, {"n": n}, ALICE)).id for n in range(TASKS)]
            async with app.worker(concurrency=4, prefetch=prefetch, **FAST):
                ended = [await app.wait(task_id, ALICE, timeout=WAIT_S) for task_id in ids]
        assert ran == dict.fromkeys(ids, 1)
        for n, (task_id, snapshot) in enumerate(zip(ids, ended, strict=True)):
            assert snapshot.status == TaskStatus.COMPLETED, task_id
            assert snapshot.result == n * 2
            assert snapshot.deliveries == 1
            history = await store.history(task_id, tenant=ALICE.tenant)
            assert [record.kind for record in history] == ["completed"]

    async def test_a_prefetching_worker_gives_its_held_claims_back_at_shutdown(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """With ``prefetch=2`` and one slot, a worker MUST claim the next two tasks while
        its handler runs without starting them; its shutdown MUST give every claim back
        — the held ones unstarted, the running one stopped for the shutdown — so that
        another worker can claim all three at once (no lease to wait out), none of them
        recorded as cancelled or failed.

        Troubleshooting: a held claim that stays claimed after the shutdown means
        ``release`` left the lease live; a history entry means the release was written
        as an event.
        """
        app = App(store=store)
        started: list[str] = []

        @app.task(name="parked")
        async def parked(ctx: TaskContext) -> None:
            started.append(ctx.task_id)
            await ctx.sleep(WAIT_S)
            ctx.raise_if_cancelled()

        async def first_started() -> bool:
            return bool(started)

        async with app:
            ids = await submitted_in_order(app, parked, clock, 3)
            worker = app.worker(concurrency=1, prefetch=2, **FAST)
            async with worker:
                for task_id in ids:
                    await _until(partial(_claimed, app, task_id), f"{task_id} claimed")
                await _until(first_started, "the first handler started")
                assert started == ids[:1]  # the slot is taken: the others are held
                assert await worker.shutdown(drain_timeout=WAIT_S)
            for task_id in ids:
                given_back = await app.get(task_id, ALICE)
                assert given_back.status == TaskStatus.PENDING, task_id
                assert given_back.deliveries == 1
                assert given_back.claim is not None
                assert given_back.claim.ended
                assert await store.history(task_id, tenant=ALICE.tenant) == []
        assert started == ids[:1]
        again = await store.claim_next("another-worker", LEASE_S, queues=["default"], limit=3)
        assert sorted(claim.snapshot.id for claim in again) == sorted(ids)

    async def test_a_task_claimed_ahead_reads_claimed_until_its_handler_starts(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """With one slot and ``prefetch=1``, the task a worker holds ahead MUST read
        ``claimed`` (never ``running``) while the slot is taken, and ``running`` once its
        handler has started (the worker renews it a short run after the start).

        Troubleshooting: ``claim_next(start=...)`` must hold the claims past ``start``
        (``ClaimInfo.held``) and ``renew`` must clear it.
        """
        app = App(store=store)
        gate, second_started, release = asyncio.Event(), asyncio.Event(), asyncio.Event()

        @app.task(name="gated")
        async def gated(ctx: TaskContext) -> None:
            if ctx.task_id == first:
                await gate.wait()
            else:
                second_started.set()
                await release.wait()

        async with app:
            first, second = await submitted_in_order(app, gated, clock, 2)
            async with app.worker(concurrency=1, prefetch=1, **FAST):
                await _until(partial(_reads, app, second, TaskStatus.CLAIMED),
                             "the second task held")
                assert (await app.get(first, ALICE)).status == TaskStatus.RUNNING
                listed = await app.list(ALICE, status=TaskStatus.CLAIMED)
                assert [second] == [snapshot.id for snapshot in listed.items]
                gate.set()
                await asyncio.wait_for(second_started.wait(), WAIT_S)
                await _until(partial(_reads, app, second, TaskStatus.RUNNING),
                             "the second task running")
                release.set()
                await app.wait(second, ALICE, timeout=WAIT_S)

    async def test_a_held_claim_of_a_task_cancelled_through_the_app_never_starts(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A cancel recorded through the worker's own app while the task's claim is held
        (``prefetch``) MUST keep its handler from ever running: the task stays
        ``cancelled`` and the next task is claimed and run in its place.

        Troubleshooting: the worker learns of the cancel in-process; a store whose
        ``claim_next`` hands the cancelled task out again would make it start.
        """
        app = App(store=store)
        started: list[str] = []
        gate = asyncio.Event()

        @app.task(name="gated")
        async def gated(ctx: TaskContext) -> None:
            started.append(ctx.task_id)
            await gate.wait()

        async with app:
            first, second = await submitted_in_order(app, gated, clock, 2)
            async with app.worker(concurrency=1, prefetch=1, **FAST):
                await _until(partial(_claimed, app, second), "the second task held")
                await app.cancel(second, ALICE)
                (third,) = await submitted_in_order(app, gated, clock, 1)
                await _until(partial(_claimed, app, third), "the third task held")
                gate.set()
                done = await app.wait(third, ALICE, timeout=WAIT_S)
            assert done.status == TaskStatus.COMPLETED
            assert (await app.get(second, ALICE)).status == TaskStatus.CANCELLED
        assert started == [first, third]
