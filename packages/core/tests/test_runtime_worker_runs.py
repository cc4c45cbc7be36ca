"""The worker running handlers: threads and contexts, progress, a write that meets a new
revision, heartbeats, its settings and ``run_worker`` (memory store)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from datetime import datetime, timedelta
from typing import Any

import pytest
from _runtime_kit import ALICE, BOB, TIMEOUT, RecordingStore, fast_worker, make_app, until
from tasks_core import InvalidInput, ManualClock, Snapshot, TaskContext, TaskStatus, Worker
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


async def test_async_and_sync_handlers_complete_with_their_results() -> None:
    """An async handler MUST run on the worker's loop thread and a sync one in another
    thread; both results MUST be stored."""
    app = make_app()
    threads: dict[str, str] = {}

    @app.task
    async def add(ctx: TaskContext, a: int, b: int) -> int:
        threads["async"] = threading.current_thread().name
        return a + b

    @app.task
    def mul(ctx: TaskContext, a: int, b: int) -> int:
        threads["sync"] = threading.current_thread().name
        return a * b

    async with app:
        s = await app.submit(add, {"a": 2, "b": 3}, ALICE)
        m = await app.submit(mul, {"a": 2, "b": 3}, ALICE)
        async with fast_worker(app):
            done = [await app.wait(t.id, ALICE, timeout=TIMEOUT) for t in (s, m)]
    assert [5, 6] == [d.result for d in done]
    assert [TaskStatus.COMPLETED] * 2 == [d.status for d in done]
    assert threading.current_thread().name == threads["async"]
    assert threading.current_thread().name != threads["sync"]


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_handlers_do_not_inherit_the_submitters_context_variables(kind: str) -> None:
    """A handler MUST run in a fresh contextvars.Context: a variable the submitter (and
    the worker's creator) set is not visible, and what the handler sets does not leak
    back."""
    app = make_app()

    def body(ctx: TaskContext) -> str:
        seen = REQUEST_ID.get()
        REQUEST_ID.set("set-by-handler")
        return seen

    if kind == "async":

        @app.task(name="probe")
        async def probe_async(ctx: TaskContext) -> str:
            return body(ctx)
    else:

        @app.task(name="probe")
        def probe_sync(ctx: TaskContext) -> str:
            return body(ctx)

    async with app:
        REQUEST_ID.set("submitter-request-42")
        t = await app.submit("probe", None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
        assert "unset" == done.result
        assert "submitter-request-42" == REQUEST_ID.get()


async def test_context_describes_the_run() -> None:
    """TaskContext MUST carry the task id, input, attempt, deliveries and an idempotency
    key stable for the run (the submitter's when given)."""
    app = make_app()
    seen: dict[str, dict[str, Any]] = {}

    @app.task
    async def probe(ctx: TaskContext, x: int) -> None:
        seen[ctx.task_id] = ({"id": ctx.task_id, "input": ctx.input, "attempt": ctx.attempt,
                     "deliveries": ctx.deliveries, "key": ctx.idempotency_key,
                     "name": ctx.name, "queue": ctx.queue, "owner": ctx.owner})

    async with app:
        a = await app.submit(probe, {"x": 1}, ALICE)
        b = await app.submit(probe, {"x": 2}, ALICE, idempotency_key="pay-7")
        async with fast_worker(app, concurrency=1):
            for t in (a, b):
                await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert {"id": a.id, "input": {"x": 1}, "attempt": 1, "deliveries": 1,
            "key": f"{a.id}:{a.run_id}", "name": "probe", "queue": "default",
            "owner": ALICE} == seen[a.id]
    assert "pay-7" == seen[b.id]["key"]


async def test_progress_reaches_the_store() -> None:
    """``ctx.progress`` MUST be stored (throttled) and its last value kept after the end."""
    app = make_app()

    @app.task
    def job(ctx: TaskContext) -> None:
        for value in range(0, 101, 10):
            ctx.progress(value, f"at {value}")

    async with app:
        t = await app.submit(job, None, ALICE)
        async with fast_worker(app, progress_interval=60):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert done.progress is not None
    assert (100.0, "at 100") == (done.progress.value, done.progress.message)


@pytest.mark.parametrize("value", [101, -1, float("nan"), True, "50"])
async def test_progress_out_of_range_raises_in_the_handler(value: Any) -> None:
    """A progress value outside 0..100, not finite or not a number (a bool, a string)
    MUST raise InvalidInput in the handler."""
    app = make_app()

    @app.task
    async def job(ctx: TaskContext) -> str:
        try:
            ctx.progress(value)
        except InvalidInput:
            return "refused"
        return "accepted"

    async with app:
        t = await app.submit(job, None, ALICE)
        async with fast_worker(app):
            assert "refused" == (await app.wait(t.id, ALICE, timeout=TIMEOUT)).result


async def test_a_worker_write_that_meets_a_new_revision_retries_and_lands() -> None:
    """A worker event sent at a stale revision (a watcher joined meanwhile) MUST be retried
    at the current revision and applied, with the same event id."""
    store = RecordingStore(MemoryStore(clock=ManualClock()))
    app = make_app(store=store)
    started = asyncio.Event()
    proceed = asyncio.Event()

    @app.task
    async def job(ctx: TaskContext) -> str:
        started.set()
        await proceed.wait()
        return "ok"

    async with app:
        t = await app.submit(job, None, ALICE, key="k")
        async with fast_worker(app):
            await asyncio.wait_for(started.wait(), TIMEOUT)
            joined = await app.submit(job, None, ALICE, key="k", watchers=[BOB])
            assert 1 == joined.snapshot.revision
            proceed.set()
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    writes = [r for r in store.records if r.event.kind == "completed"]
    assert ["RevisionConflict", "applied"] == [
        type(r.error).__name__ if r.error else r.result.outcome  # type: ignore[union-attr]
        for r in writes
    ]
    assert 1 == len({r.event.event_id for r in writes})
    assert ("ok", 2) == (done.result, done.revision)


async def test_heartbeats_keep_a_long_run_leased() -> None:
    """Heartbeats MUST renew the lease, so a run longer than one lease stays with its
    worker (no second delivery)."""
    clock = ManualClock()
    app = make_app(clock)
    started = asyncio.Event()
    proceed = asyncio.Event()

    @app.task
    async def long(ctx: TaskContext) -> int:
        started.set()
        await proceed.wait()
        return ctx.deliveries

    async with app:
        t = await app.submit(long, None, ALICE)
        async with fast_worker(app, lease_for=0.3):
            await asyncio.wait_for(started.wait(), TIMEOUT)
            for _ in range(4):  # 4 x 0.2 s of store time: well past one 0.3 s lease
                renewed_after = clock.now() + timedelta(seconds=0.25)

                def renewed(s: Snapshot, after: datetime = renewed_after) -> bool:
                    return s.claim is not None and s.claim.expires_at > after

                await until(app, t.id, ALICE, renewed)
                clock.advance(0.2)
            proceed.set()
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert (TaskStatus.COMPLETED, 1, 1) == (done.status, done.result, done.deliveries)


def test_worker_refuses_undeclared_queues_and_bad_settings() -> None:
    """Serving an undeclared queue, or a non-positive setting, MUST raise InvalidInput."""
    app = make_app()
    with pytest.raises(InvalidInput, match="undeclared"):
        Worker(app, queues=["nope"])
    with pytest.raises(InvalidInput):
        Worker(app, concurrency=0)
    with pytest.raises(InvalidInput):
        Worker(app, lease_for=0)
    with pytest.raises(InvalidInput):
        Worker(app, queues="default")


async def test_run_worker_serves_until_cancelled() -> None:
    """``app.run_worker(...)`` MUST run a worker until cancelled."""
    app = make_app()

    @app.task
    async def job(ctx: TaskContext) -> str:
        return "ok"

    async with app:
        serving = asyncio.create_task(app.run_worker(poll_interval=0.02, reap_interval=None))
        t = await app.submit(job, None, ALICE)
        assert "ok" == (await app.wait(t.id, ALICE, timeout=TIMEOUT)).result
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
