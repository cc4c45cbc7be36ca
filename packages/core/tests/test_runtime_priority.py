"""Priorities through the App: a task's default, a submit's override, refusals before
anything is written, and a worker taking the highest priority first."""

from __future__ import annotations

from typing import Any

import pytest
from _runtime_kit import ALICE, TIMEOUT, fast_worker, make_app
from tasks_core import InvalidInput, ManualClock, System, TaskContext, TaskQuery

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("priority", [101, -101, True, 1.5, "1", None])
def test_a_bad_default_priority_is_refused_at_registration(priority: Any) -> None:
    """``@app.task(priority=…)`` takes an integer in [-100, 100]; anything else is
    ``InvalidInput`` and registers nothing."""
    app = make_app()
    with pytest.raises(InvalidInput, match="priority"):
        @app.task(priority=priority)
        async def job(ctx: TaskContext) -> None:
            return None
    assert "job" not in app.tasks


@pytest.mark.parametrize("priority", [101, -101, True, 2.0, "1"])
async def test_a_bad_priority_is_refused_before_anything_is_written(priority: Any) -> None:
    """``submit(..., priority=…)`` outside [-100, 100], or not an integer: ``InvalidInput``;
    nothing stored."""
    app = make_app()

    @app.task
    async def job(ctx: TaskContext) -> None:
        return None

    async with app:
        with pytest.raises(InvalidInput, match=r"^priority must be an integer in -100\.\.100"):
            await app.submit(job, None, ALICE, priority=priority)
        store = await app.open()
        assert [] == await store.list(TaskQuery(tenant=None))


async def test_the_bounds_themselves_are_priorities() -> None:
    """-100 and 100 are accepted, at registration and per submit."""
    app = make_app()

    @app.task(priority=-100)
    async def low(ctx: TaskContext) -> None:
        return None

    async with app:
        ids = [(await low.submit(None, ALICE)).id,
               (await low.submit(None, ALICE, priority=100)).id]
        assert [-100, 100] == [(await app.get(i, ALICE)).priority for i in ids]


async def test_the_task_default_applies_and_a_submit_overrides_it() -> None:
    """A task registered with ``priority=5`` is submitted at 5 unless the submit names
    another; a task registered without one is at 0."""
    app = make_app()

    @app.task(priority=5)
    async def urgent(ctx: TaskContext) -> None:
        return None

    @app.task
    async def plain(ctx: TaskContext) -> None:
        return None

    async with app:
        ids = [(await urgent.submit(None, ALICE)).id,
               (await urgent.submit(None, ALICE, priority=-3)).id,
               (await plain.submit(None, ALICE)).id]
        assert [5, -3, 0] == [(await app.get(i, ALICE)).priority for i in ids]


async def test_a_worker_runs_the_highest_priority_first() -> None:
    """With a backlog waiting, a worker of concurrency 1 runs the higher priority first
    although it was submitted last."""
    clock = ManualClock()
    app = make_app(clock)
    order: list[str] = []

    @app.task
    async def job(ctx: TaskContext, name: str) -> None:
        order.append(name)

    async with app:
        for name in ("first", "second"):
            await job.submit({"name": name}, ALICE)
            clock.advance(1)
        last = await job.submit({"name": "urgent"}, System(), priority=10)
        async with fast_worker(app, concurrency=1, prefetch=0):
            await app.wait(last.id, System(), timeout=TIMEOUT)
            for snapshot in await (await app.open()).list(TaskQuery(tenant=None)):
                await app.wait(snapshot.id, System(), timeout=TIMEOUT)
    assert ["urgent", "first", "second"] == order
