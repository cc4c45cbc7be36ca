"""Shutdown drain: stop claiming, release the unstarted, token, bounded wait, leases kept."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest
from _runtime_kit import ALICE, TIMEOUT, DelegatingStore, GateStore, fast_worker, make_app, until
from tasks_core import (
    App,
    CancelReason,
    ManualClock,
    RunCancelled,
    Snapshot,
    TaskContext,
    TaskDef,
    TaskStatus,
)
from tasks_core.errors import StoreUnavailable
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("ending", ["drain", "cancel"])
async def test_claims_that_arrive_as_the_worker_ends_never_start(ending: str) -> None:
    """Claims that reach the worker after its end began MUST never start. A drain releases
    them at once: pending again, nothing cancelled, and the drain settles. A cancel (not a
    drain: like a killed process) leaves them to their leases."""
    inner = MemoryStore(clock=ManualClock())
    store = GateStore(inner)
    app = make_app(store=store)
    ran: list[str] = []

    @app.task
    async def job(ctx: TaskContext) -> None:
        ran.append(ctx.task_id)

    async with app:
        ids = [(await app.submit(job, None, ALICE)).id for _ in range(3)]
        store.armed = True
        worker = fast_worker(app)
        serving = asyncio.create_task(worker.run())
        await asyncio.wait_for(store.entered.wait(), TIMEOUT)  # claimed, not yet handed over
        if ending == "drain":
            drain = asyncio.create_task(worker.shutdown(drain_timeout=TIMEOUT))
            await asyncio.sleep(0)  # let the drain begin: it stops claiming before any await
            assert worker.stopping
            store.gate.set()
            assert await drain
            await serving
        else:
            serving.cancel()
            with pytest.raises(asyncio.CancelledError):
                await serving
            store.gate.set()
            await asyncio.sleep(0)  # one loop step: a claim task still alive hands over in it
        snapshots = [await app.get(task_id, ALICE) for task_id in ids]
    assert ([], {}) == (ran, worker.runs)
    if ending == "cancel":
        assert [TaskStatus.RUNNING] * 3 == [s.status for s in snapshots], "left to leases"
        return
    assert [TaskStatus.PENDING] * 3 == [s.status for s in snapshots]
    assert [1] * 3 == [s.deliveries for s in snapshots], "the delivery stays counted"
    assert all(s.claim is not None and s.claim.ended for s in snapshots)
    assert [0] * 3 == [s.revision for s in snapshots], "nothing was written"


async def test_a_run_that_stops_for_the_shutdown_is_released_not_cancelled() -> None:
    """Running tokens MUST get ``shutdown``; a handler that stops for it (raising) MUST be
    released for another worker — pending, not cancelled, no retry consumed."""
    app = make_app()
    started = asyncio.Event()
    seen: list[Any] = []

    @app.task
    async def job(ctx: TaskContext) -> str:
        started.set()
        try:
            await ctx.sleep(TIMEOUT)
        except RunCancelled as exc:
            seen.append((exc.reason, ctx.cancel_reason))
            raise
        return "finished"

    snapshot = await _drained_while_running(app, job, started)
    assert [(CancelReason.SHUTDOWN, CancelReason.SHUTDOWN)] == seen
    assert (TaskStatus.PENDING, None, 0, 0) == (snapshot.status, snapshot.cancel_reason,
                                                snapshot.retry_count, snapshot.revision)
    assert snapshot.claim is not None
    assert snapshot.claim.ended


async def test_a_run_that_finishes_during_the_drain_is_recorded() -> None:
    """A handler that returns a value during the drain MUST be recorded ``completed``."""
    app = make_app()
    started = asyncio.Event()

    @app.task
    async def job(ctx: TaskContext) -> str:
        started.set()
        await ctx.token.wait()
        return "done in time"

    snapshot = await _drained_while_running(app, job, started)
    assert (TaskStatus.COMPLETED, "done in time") == (snapshot.status, snapshot.result)


async def test_runs_that_outlive_the_drain_keep_their_lease_and_are_reported() -> None:
    """``shutdown`` MUST return False when a run outlives ``drain_timeout``; that run MUST
    keep its (live) lease rather than be released or cancelled, and may still finish."""
    app = make_app()
    started = threading.Event()
    release = threading.Event()

    @app.task
    def stubborn(ctx: TaskContext) -> str:
        started.set()
        release.wait(TIMEOUT)  # ignores the token
        return "late but fine"

    async with app:
        t = await app.submit(stubborn, None, ALICE)
        worker = fast_worker(app)
        serving = asyncio.create_task(worker.run())
        assert await asyncio.to_thread(started.wait, TIMEOUT)
        assert not await worker.shutdown(drain_timeout=0.05)
        await serving
        assert [t.id] == worker.running
        held = await app.get(t.id, ALICE)
        assert (TaskStatus.RUNNING, 0) == (held.status, held.revision)
        assert held.claim is not None
        assert not held.claim.ended
        assert not await worker.shutdown(), "asking again gives the same answer"
        release.set()
        done = await until(app, t.id, ALICE, lambda s: s.terminal)
    assert (TaskStatus.COMPLETED, "late but fine") == (done.status, done.result)


async def test_worker_as_context_manager_drains_on_exit() -> None:
    """``async with worker`` MUST drain on exit (stop claiming, wait for runs)."""
    app = make_app()
    started = asyncio.Event()
    finished: list[str] = []

    @app.task
    async def job(ctx: TaskContext) -> None:
        started.set()
        try:
            await ctx.sleep(TIMEOUT)
        except RunCancelled:
            finished.append(str(ctx.cancel_reason))

    async with app:
        t = await app.submit(job, None, ALICE)
        async with fast_worker(app):
            await asyncio.wait_for(started.wait(), TIMEOUT)
        snapshot = await app.get(t.id, ALICE)
    assert ["shutdown"] == finished
    assert TaskStatus.COMPLETED == snapshot.status


async def _drained_while_running(app: App, job: TaskDef, started: asyncio.Event) -> Snapshot:
    """Submit ``job``, shut a worker down (drain) once the handler has started; the task
    afterwards. The drain MUST settle within ``TIMEOUT``."""
    async with app:
        t = await app.submit(job, None, ALICE)
        worker = fast_worker(app)
        serving = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), TIMEOUT)
        assert await worker.shutdown(drain_timeout=TIMEOUT)
        await serving
        return await app.get(t.id, ALICE)


class _FailingWrites(DelegatingStore):
    """Once ``failing``, every write of a worker's outcome fails as a store outage."""

    failing = False

    async def transition(self, *args: Any) -> Any:
        if self.failing:
            raise StoreUnavailable("the store is down")
        return await self.inner.transition(*args)

    async def transition_many(self, items: Any) -> Any:
        if self.failing:
            raise StoreUnavailable("the store is down")
        return await self.inner.transition_many(items)

    async def release(self, lease: Any) -> Any:
        if self.failing:
            raise StoreUnavailable("the store is down")
        return await self.inner.release(lease)


async def test_a_drain_whose_outcome_could_not_be_written_is_not_settled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run that ends during the drain but whose outcome the store refused to take
    (``StoreUnavailable`` until its lease ran out) MUST make ``shutdown`` return False and be
    named in a warning: the task is not recorded and runs again once its lease expires."""
    store = _FailingWrites(MemoryStore(clock=ManualClock()))
    app = make_app(store=store)
    started = asyncio.Event()

    @app.task
    async def job(ctx: TaskContext) -> str:
        started.set()
        await ctx.token.wait()
        store.failing = True
        return "done, but never recorded"

    async with app:
        t = await app.submit(job, None, ALICE)
        worker = fast_worker(app, lease_for=0.3)  # the writes are tried while it lasts
        serving = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), TIMEOUT)
        with caplog.at_level("WARNING", logger="tasks_core.worker"):
            assert not await worker.shutdown(drain_timeout=TIMEOUT)
        await serving
        store.failing = False
        snapshot = await app.get(t.id, ALICE)
    assert (TaskStatus.RUNNING, 0) == (snapshot.status, snapshot.revision)
    assert any("could not be written" in r.getMessage() and t.id in r.getMessage()
               for r in caplog.records)


class _BriefOutage(DelegatingStore):
    """Refuses the first ``outage`` writes of an outcome as a store outage."""

    def __init__(self, inner: Any, outage: int) -> None:
        super().__init__(inner)
        self.outage = outage

    def _down(self) -> bool:
        self.outage -= 1
        return self.outage >= 0

    async def transition(self, *args: Any) -> Any:
        if self._down():
            raise StoreUnavailable("the store is down")
        return await self.inner.transition(*args)

    async def transition_many(self, items: Any) -> Any:
        if self._down():
            raise StoreUnavailable("the store is down")
        return await self.inner.transition_many(items)


async def test_an_outcome_is_tried_again_while_its_lease_lasts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """An outcome the store refuses as unavailable MUST be tried again for as long as the
    run's lease lasts, however many tries that takes — not given up after a fixed few
    (five tries, ~1.5 s, threw away a finished handler's result on PostgreSQL while its
    30 s lease had time left, and the task ran again) — and the outage MUST be logged once
    when it begins and once when it ends, not once per try (a 40 s outage logged ~300
    lines at concurrency 8).

    Troubleshooting: ``LeaseCell.write`` (``_lease.py``) tries until ``live_until``; its
    ``writes`` and the group commit's ``_outage`` are ``Outage`` logs.
    """
    caplog.set_level(logging.INFO, logger="tasks_core")  # a CLI test may have raised it
    monkeypatch.setattr("tasks_core.runtime._lease.MAX_BACKOFF_S", 0.01)
    store = _BriefOutage(MemoryStore(clock=ManualClock()), outage=12)
    app = make_app(store=store)
    runs: list[int] = []

    @app.task
    async def job(ctx: TaskContext) -> str:
        runs.append(ctx.deliveries)
        return "kept"

    async with app:
        t = await app.submit(job, None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert (TaskStatus.COMPLETED, "kept", [1], -1) == (done.status, done.result, runs,
                                                         store.outage)
    said = [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name.startswith("tasks_core") and "the store is down" in r.getMessage()]
    assert 1 <= len(said) <= 2, said  # the writes' outage, and the group commit's if any
    assert {level for level, _ in said} == {"WARNING"}
    again = [r.getMessage() for r in caplog.records
             if r.levelno == logging.INFO and " works again after " in r.getMessage()]
    assert len(again) == len(said), again


async def test_a_drain_whose_unstarted_claim_could_not_be_released_is_not_settled() -> None:
    """A claim given back unstarted during the drain whose release the store refused
    MUST make ``shutdown`` return False (the task waits for its lease to expire)."""
    store = _FailingWrites(MemoryStore(clock=ManualClock()))
    gate = GateStore(store)
    app = make_app(store=gate)

    @app.task
    async def job(ctx: TaskContext) -> None:
        raise AssertionError("never started")

    async with app:
        t = await app.submit(job, None, ALICE)
        gate.armed = True
        worker = fast_worker(app)
        serving = asyncio.create_task(worker.run())
        await asyncio.wait_for(gate.entered.wait(), TIMEOUT)
        drain = asyncio.create_task(worker.shutdown(drain_timeout=TIMEOUT))
        await asyncio.sleep(0)
        store.failing = True
        gate.gate.set()
        assert not await drain
        await serving
        store.failing = False
        snapshot = await app.get(t.id, ALICE)
    assert (TaskStatus.RUNNING, 0) == (snapshot.status, snapshot.revision)


async def test_a_shutdown_wakes_a_claim_loop_that_waits_for_a_slot() -> None:
    """A worker whose slots are all taken and whose held claim has a long wait before its
    release (a ten-minute lease) MUST give the held claim back as soon as its shutdown
    begins, not when the drain's time is up."""
    clock = ManualClock()
    app = make_app(clock)
    gate = asyncio.Event()

    @app.task
    async def blocked(ctx: TaskContext) -> None:
        await gate.wait()

    async with app:
        first = await app.submit(blocked, None, ALICE)
        clock.advance(0.001)
        held = await app.submit(blocked, None, ALICE)
        worker = fast_worker(app, concurrency=1, prefetch=1, lease_for=600.0)
        async with worker:
            await until(app, held.id, ALICE, lambda s: s.status == TaskStatus.CLAIMED)
            assert worker.running == [first.id]
            draining = asyncio.create_task(worker.shutdown(drain_timeout=3 * TIMEOUT))
            released = await until(app, held.id, ALICE,
                                   lambda s: s.status == TaskStatus.PENDING)
            assert released.claim is not None
            assert released.claim.ended
            gate.set()
            await draining
