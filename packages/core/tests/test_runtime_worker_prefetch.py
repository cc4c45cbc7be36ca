"""The worker's prefetch: claims held ahead of the free slots, started oldest first or
released unstarted, and ``prefetch="auto"`` (memory store)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _runtime_kit import ALICE, LEASED, TIMEOUT, RecordingStore, fast_worker, make_app, until
from tasks_contract_tests._kit import submitted_in_order
from tasks_core import App, InvalidInput, ManualClock, Queue, TaskContext, TaskStatus, Worker
from tasks_core.runtime import worker as worker_module
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


class _Gated:
    """An app on a memory store with a manual clock, and a task whose runs record their
    start and wait for ``gate``."""

    def __init__(self, *, recording: bool = False) -> None:
        self.clock = ManualClock()
        memory = MemoryStore(clock=self.clock)
        self.store = RecordingStore(memory) if recording else memory
        self.app = make_app(store=self.store)
        self.started: list[str] = []
        self.gate = asyncio.Event()

        @self.app.task(name="gated")
        async def gated(ctx: TaskContext) -> None:
            self.started.append(ctx.task_id)
            await self.gate.wait()

        self.job = gated

    async def submit(self, count: int) -> list[str]:
        """Submit ``count`` tasks a millisecond apart: claims take them in this order."""
        return await submitted_in_order(self.app, self.job, self.clock, count)

    async def finish(self, ids: list[str]) -> None:
        """Open the gate and wait until every task of ``ids`` has ended."""
        self.gate.set()
        for task_id in ids:
            await self.app.wait(task_id, ALICE, timeout=TIMEOUT)


async def _claimed_ids(app: App, ids: list[str]) -> list[str]:
    """The tasks of ``ids`` whose lease is live now (claimed, started or not)."""
    return [i for i in ids if (await app.get(i, ALICE)).status in LEASED]


async def test_prefetch_claims_beyond_the_free_slots_and_starts_held_claims_oldest_first() -> None:
    """With ``prefetch=N`` the worker MUST claim up to N tasks beyond its free slots while
    its handlers run, and start them oldest first as slots free."""
    g = _Gated(recording=True)
    app = g.app

    async with app:
        ids = await g.submit(6)
        async with fast_worker(app, concurrency=2, prefetch=2) as worker:
            await until(app, ids[3], ALICE, lambda s: s.status in LEASED)
            assert g.started == ids[:2]
            assert await _claimed_ids(app, ids) == ids[:4]
            assert [claim.snapshot.id for _, claim in worker._held] == ids[2:4]
            assert [(await app.get(i, ALICE)).status for i in ids[:4]] == [
                TaskStatus.RUNNING, TaskStatus.RUNNING, TaskStatus.CLAIMED, TaskStatus.CLAIMED]
            g.gate.set()
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    assert g.started == ids
    assert isinstance(g.store, RecordingStore)
    assert g.store.claim_limits[0] == 4
    assert all(1 <= limit <= 4 for limit in g.store.claim_limits)


async def test_a_claim_held_for_a_heartbeat_interval_is_released_and_prefetch_pauses() -> None:
    """A held claim that finds no free slot within ``lease_for / 3`` MUST be released
    unstarted (another worker may take it), and the worker MUST claim no further ahead
    while its runs are long — a long handler does not burn the task's deliveries."""
    g = _Gated()
    app = g.app

    async with app:
        first, second = await g.submit(2)
        async with fast_worker(app, concurrency=1, prefetch=1, lease_for=0.3) as worker:
            released = await until(app, second, ALICE,
                                   lambda s: s.claim is not None and s.claim.ended)
            assert released.status == TaskStatus.PENDING
            assert released.deliveries == 1
            assert g.started == [first]
            assert not worker._held
            assert await _claimed_ids(app, [second]) == []  # not claimed again
            g.gate.set()
            done = await app.wait(second, ALICE, timeout=TIMEOUT)
    assert done.status == TaskStatus.COMPLETED
    assert done.deliveries == 2
    assert g.started == [first, second]


async def test_long_runs_behind_a_released_hold_do_not_spend_the_deliveries() -> None:
    """After held claims were released, a worker of long runs MUST NOT claim ahead again
    as soon as a run ends (each release costs the task a delivery): with ``prefetch=3``,
    ``max_deliveries=2`` and runs longer than the hold (``lease_for / 3``), five runs in a
    row all complete, none failed past its delivery limit unstarted."""
    clock = ManualClock()
    app = make_app(store=MemoryStore(clock=clock))

    @app.task(name="long", max_deliveries=2)
    async def long(ctx: TaskContext) -> None:
        await asyncio.sleep(0.15)  # the work: longer than a claim may be held (0.1 s)

    async with app:
        ids = await submitted_in_order(app, long, clock, 5)
        async with fast_worker(app, concurrency=1, prefetch=3, lease_for=0.3):
            done = [await app.wait(task_id, ALICE, timeout=TIMEOUT) for task_id in ids]
    assert [TaskStatus.COMPLETED] * 5 == [s.status for s in done]
    assert max(s.deliveries for s in done) <= 2


async def test_a_shutdown_releases_held_claims_unstarted() -> None:
    """Claims held when a shutdown begins MUST be released unstarted: claimable again at
    once, by any worker."""
    g = _Gated()
    app = g.app

    async with app:
        ids = await g.submit(3)
        worker = fast_worker(app, concurrency=1, prefetch=2)
        async with worker:
            await until(app, ids[2], ALICE, lambda s: s.status in LEASED)
            g.gate.set()  # the running handler ends during the drain
            assert await worker.shutdown(drain_timeout=TIMEOUT)
        for task_id in ids[1:]:
            held = await app.get(task_id, ALICE)
            assert held.status == TaskStatus.PENDING
            assert held.claim is not None
            assert held.claim.ended
    assert g.started == ids[:1]


async def test_a_held_claim_of_a_task_cancelled_through_the_app_is_never_started() -> None:
    """A cancel recorded through the worker's app while the task's claim is held MUST keep
    the handler from ever running it: the next held claim starts in its place."""
    g = _Gated()
    app = g.app

    async with app:
        first, second = await g.submit(2)
        async with fast_worker(app, concurrency=1, prefetch=1) as worker:
            await until(app, second, ALICE, lambda s: s.status in LEASED)
            assert [claim.snapshot.id for _, claim in worker._held] == [second]
            await app.cancel(second, ALICE)
            assert not worker._held
            g.clock.advance(0.001)
            (third,) = await g.submit(1)
            await until(app, third, ALICE, lambda s: s.status in LEASED)
            g.gate.set()
            assert (await app.wait(third, ALICE, timeout=TIMEOUT)).status == \
                TaskStatus.COMPLETED
        assert (await app.get(second, ALICE)).status == TaskStatus.CANCELLED
    assert g.started == [first, third]


async def test_prefetch_never_claims_ahead_for_a_queue_with_a_concurrency_limit() -> None:
    """A queue's own concurrency limit MUST hold with prefetch: its claims ask for its free
    slots only."""
    clock = ManualClock()
    store = RecordingStore(MemoryStore(clock=clock))
    app = make_app(store=store)
    app.declare_queue(Queue("one", concurrency=1))
    started: list[str] = []
    gate = asyncio.Event()

    @app.task(name="limited", queue="one")
    async def limited(ctx: TaskContext) -> None:
        started.append(ctx.task_id)
        await gate.wait()

    async with app:
        ids = await submitted_in_order(app, limited, clock, 3)
        async with fast_worker(app, queues=["one"], concurrency=4, prefetch=4):
            await until(app, ids[0], ALICE, lambda s: s.status in LEASED)
            assert await _claimed_ids(app, ids) == ids[:1]
            gate.set()
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    assert started == ids
    assert set(store.claim_limits) == {1}


@contextlib.asynccontextmanager
async def _auto_worker_after_short_runs(
    g: _Gated, count: int = 4
) -> AsyncIterator[tuple[Worker, list[str]]]:
    """A running ``prefetch="auto"`` worker of two slots (every run counts as short) that
    has run two tasks, with ``count`` more submitted while the gate is shut: it and
    those."""
    worker = fast_worker(g.app, concurrency=2)
    assert worker.prefetch == "auto"
    worker._short_run = 60.0
    g.gate.set()
    warm = await g.submit(2)
    async with worker:
        await g.finish(warm)
        g.gate.clear()
        yield worker, await g.submit(count)


async def test_auto_prefetch_claims_nothing_ahead_before_runs_have_proven_short() -> None:
    """A worker with the default ``prefetch="auto"`` MUST claim no more than its free
    slots until ``concurrency`` runs in a row have held their slot only briefly."""
    g = _Gated(recording=True)
    async with g.app:
        ids = await g.submit(4)
        async with fast_worker(g.app, concurrency=2) as worker:
            worker._short_run = 60.0
            await until(g.app, ids[1], ALICE, lambda s: s.status in LEASED)
            assert await _claimed_ids(g.app, ids) == ids[:2]
            assert not worker._held
            await g.finish(ids)
    assert isinstance(g.store, RecordingStore)
    assert g.store.claim_limits[0] == 2


async def test_auto_prefetch_claims_ahead_while_runs_are_short() -> None:
    """After ``concurrency`` short runs in a row, ``prefetch="auto"`` MUST claim up to
    ``AUTO_AHEAD * concurrency`` tasks beyond the free slots, no more, and start them
    oldest first."""
    ahead = worker_module.AUTO_AHEAD * 2
    g = _Gated()
    async with g.app, _auto_worker_after_short_runs(g, 2 + ahead + 2) as (worker, ids):
        await until(g.app, ids[1 + ahead], ALICE, lambda s: s.status in LEASED)
        assert g.started[-2:] == ids[:2]
        assert [claim.snapshot.id for _, claim in worker._held] == ids[2:2 + ahead]
        assert await _claimed_ids(g.app, ids) == ids[:2 + ahead]
        await g.finish(ids)
    assert g.started[-len(ids):] == ids


async def test_auto_prefetch_stops_claiming_ahead_once_a_run_is_long() -> None:
    """``prefetch="auto"`` MUST claim nothing ahead while a run in a slot has held it
    longer than a short run, nor after such a run ended, until ``concurrency`` short runs
    in a row have ended again."""
    g = _Gated()
    async with g.app, _auto_worker_after_short_runs(g) as (worker, ids):
        await until(g.app, ids[3], ALICE, lambda s: s.status in LEASED)
        worker._short_run = 0.0  # the runs in the slots are long from now on
        assert worker._ahead() == 0
        await g.finish(ids)
        g.gate.clear()
        later = await g.submit(4)
        await until(g.app, later[1], ALICE, lambda s: s.status in LEASED)
        assert await _claimed_ids(g.app, later) == later[:2]
        assert not worker._held
        worker._short_run = 60.0  # short again: two short runs in a row re-arm it
        await g.finish(later)
        g.gate.clear()
        again = await g.submit(4)
        await until(g.app, again[3], ALICE, lambda s: s.status in LEASED)
        assert [claim.snapshot.id for _, claim in worker._held] == again[2:]
        await g.finish(again)


@pytest.mark.parametrize("prefetch", [-1, 1001, 1.5, True, "always", None])
def test_prefetch_must_be_auto_or_a_small_non_negative_integer(prefetch: Any) -> None:
    with pytest.raises(InvalidInput, match="prefetch"):
        Worker(make_app(), prefetch=prefetch)
