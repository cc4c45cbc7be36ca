"""Delayed tasks through the App and a worker: ``delay``/``run_at`` checked before anything
is written, a scheduled task waits for its instant on the store clock, an idle worker
wakes at that instant (not at its next poll), and it can be cancelled or joined by key."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from _runtime_kit import ALICE, BOB, TIMEOUT, fast_worker, make_app
from tasks_core import (
    App,
    InvalidInput,
    ManualClock,
    Policy,
    SubmitItem,
    System,
    TaskContext,
    TaskQuery,
    TaskStatus,
)
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


async def _stored(app: App) -> int:
    store = await app.open()
    return len(await store.list(TaskQuery(tenant=None)))


@pytest.mark.parametrize(("options", "says"), [
    ({"delay": -1}, "delay"),
    ({"delay": math.nan}, "delay"),
    ({"delay": math.inf}, "delay"),
    ({"delay": True}, "delay"),
    ({"delay": "30"}, "delay"),
    ({"delay": 367 * 86400}, "delay"),
    ({"run_at": datetime(2026, 12, 24, 9)}, "naive"),
    ({"run_at": "2026-12-24T09:00Z"}, "run_at"),
    ({"run_at": datetime(9000, 1, 1, tzinfo=UTC)},
     r"run_at must lie within 3660 days of now, not 9000-01-01T00:00:00\+00:00"),
    ({"delay": 5, "run_at": datetime.now(UTC)}, "not both"),
])
async def test_bad_delay_or_run_at_is_refused_before_anything_is_written(
    options: dict[str, Any], says: str
) -> None:
    """A negative, non-finite, non-numeric or too long ``delay``, a naive or far
    ``run_at``, or both at once: ``InvalidInput`` naming the problem; nothing stored."""
    app = make_app()

    @app.task
    async def job(ctx: TaskContext) -> None:
        return None

    async with app:
        with pytest.raises(InvalidInput, match=says):
            await app.submit(job, None, ALICE, **options)
        assert 0 == await _stored(app)


async def test_a_delay_counts_on_the_store_clock_and_the_task_reads_scheduled() -> None:
    """``delay`` is added to the store's clock (a ``ManualClock`` far from the wall
    clock here), the snapshot shows ``run_at``, and the task reads ``scheduled`` until
    the store clock reaches it; a worker runs it only then."""
    clock = ManualClock()
    app = make_app(clock)
    ran: list[datetime] = []

    @app.task
    async def job(ctx: TaskContext) -> None:
        ran.append(clock.now())

    async with app:
        submitted = await job.submit(None, ALICE, delay=90)
        snapshot = await app.get(submitted.id, ALICE)
        assert snapshot.run_at == snapshot.created_at + timedelta(seconds=90)
        assert TaskStatus.SCHEDULED == snapshot.status
        async with fast_worker(app):
            clock.advance(90)
            done = await app.wait(submitted.id, ALICE, timeout=TIMEOUT)
    assert TaskStatus.COMPLETED == done.status
    assert snapshot.run_at is not None
    assert 1 == len(ran)
    assert ran[0] >= snapshot.run_at


async def test_an_idle_worker_wakes_at_the_run_at_not_at_its_next_poll() -> None:
    """A worker with nothing to do and a long poll interval starts a delayed task when
    it falls due: it sleeps until the earliest available instant the store knows of
    (``next_available``). The poll interval here is far longer than the test's bound."""
    app = make_app(store=MemoryStore())  # the system clock: the instant comes by itself
    started = asyncio.Event()

    @app.task
    async def job(ctx: TaskContext) -> None:
        started.set()

    async with app:
        async with fast_worker(app, poll_interval=600.0, min_poll=600.0):
            submitted = await job.submit(None, ALICE, delay=0.2)
            await asyncio.wait_for(started.wait(), TIMEOUT)
            done = await app.wait(submitted.id, ALICE, timeout=TIMEOUT)
    assert done.started_at is not None
    assert done.run_at is not None
    assert done.started_at >= done.run_at


async def test_a_scheduled_task_is_cancelled_and_joined_by_key_like_a_pending_one() -> None:
    """A scheduled task can be cancelled by its owner (it never runs) and a submit of its
    key while it waits joins it, keeping its ``run_at``."""
    clock = ManualClock()
    app = make_app(clock)
    ran: list[str] = []

    @app.task
    async def job(ctx: TaskContext) -> None:
        ran.append(ctx.task_id)

    async with app:
        first = await job.submit(None, ALICE, key="nightly", run_at=clock.now() + timedelta(
            hours=1))
        again = await job.submit(None, ALICE, key="nightly", delay=5)
        assert (first.id, "joined") == (again.id, again.outcome)
        assert (await app.get(first.id, ALICE)).run_at == clock.now() + timedelta(hours=1)
        other = await job.submit(None, ALICE, delay=10)
        cancelled = await app.cancel(other.id, ALICE)
        assert TaskStatus.CANCELLED == cancelled.status
        clock.advance(3600)
        async with fast_worker(app):
            await app.wait(first.id, ALICE, timeout=TIMEOUT)
    assert [first.id] == ran
    listed = await (await app.open()).list(TaskQuery(tenant=None))
    assert {first.id: TaskStatus.COMPLETED, other.id: TaskStatus.CANCELLED} == {
        s.id: s.status for s in listed}


async def test_what_a_submit_returns_reads_as_get_reads_it() -> None:
    """The snapshot a submit or a bulk submit returns MUST show the task as a read right
    after it does: ``scheduled`` until its ``run_at``, ``pending`` without a delay, for a
    created run, a new run that replaces a finished one and a run joined as a watcher."""
    app = make_app(policy=Policy(watch_authorizer=lambda task_id, newcomers, by: True))

    @app.task
    async def job(ctx: TaskContext) -> None:
        return None

    async with app:
        delayed = await job.submit(None, ALICE, delay=30)
        now = await job.submit(None, ALICE)
        many = await app.submit_many([SubmitItem(task="job", delay=30),
                                      SubmitItem(task="job")], ALICE)
        finished = await job.submit(None, ALICE, key="k")
        await app.cancel(finished.id, ALICE)
        again = await job.submit(None, ALICE, key="k", delay=30)
        await job.submit(None, ALICE, key="g", dedup="global", delay=30)
        joined = await job.submit(None, BOB, key="g", dedup="global")
        submits = (delayed, now, *many, again, joined)
        for submitted in submits:
            assert (await app.get(submitted.id, ALICE)).status == submitted.snapshot.status
        assert [TaskStatus.SCHEDULED, TaskStatus.PENDING, TaskStatus.SCHEDULED,
                TaskStatus.PENDING, TaskStatus.SCHEDULED, TaskStatus.SCHEDULED] == [
            s.snapshot.status for s in submits]
        assert ("replaced", "joined") == (again.outcome, joined.outcome)


def test_the_sync_facade_submits_a_delayed_task() -> None:
    """``app.sync.submit(..., delay=…)`` schedules like the async call."""
    app = make_app()

    @app.task
    async def job(ctx: TaskContext) -> None:
        return None

    try:
        submitted = app.sync.submit(job, None, System(), delay=30)
        snapshot = app.sync.get(submitted.id, System())
        assert TaskStatus.SCHEDULED == snapshot.status
        assert snapshot.created_at + timedelta(seconds=30) == snapshot.run_at
    finally:
        app.sync.close()
