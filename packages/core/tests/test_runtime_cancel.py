"""Cancellation: the token, user cancels of running tasks, superseded runs and fencing."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from _runtime_kit import (
    ALICE,
    TIMEOUT,
    GateStore,
    RecordingStore,
    fast_worker,
    make_app,
    until,
)
from tasks_core import (
    CancelReason,
    CancelToken,
    LeaseLost,
    ManualClock,
    TaskContext,
    TaskStatus,
)
from tasks_core.reasons import reason_error
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


async def test_token_keeps_the_first_cause() -> None:
    """The first cause MUST win; later ones MUST be ignored."""
    token = CancelToken()
    assert (False, None) == (token.cancelled, token.reason)
    assert token.cancel(CancelReason.SHUTDOWN)
    assert not token.cancel(CancelReason.USER)
    assert (True, CancelReason.SHUTDOWN) == (token.cancelled, token.reason)
    assert CancelReason.SHUTDOWN == await token.wait()


async def test_token_wakes_async_and_thread_waiters() -> None:
    """A cause set from another thread MUST wake async waiters and blocked threads."""
    token = CancelToken()
    woke: list[bool] = []
    thread = threading.Thread(target=lambda: woke.append(token.wait_sync(TIMEOUT)))
    thread.start()
    waiter = asyncio.ensure_future(token.wait())
    setter = threading.Thread(target=token.cancel, args=(CancelReason.TIMEOUT,))
    setter.start()
    assert CancelReason.TIMEOUT == await asyncio.wait_for(waiter, TIMEOUT)
    thread.join(TIMEOUT)
    setter.join(TIMEOUT)
    assert [True] == woke


async def test_a_blocking_wait_on_an_event_loop_is_refused() -> None:
    """``wait_sync`` MUST refuse to block a thread that runs an event loop (an async
    handler's worker loop: no heartbeat, no cancel, no other run while it waits), even on
    a token already cancelled."""
    token = CancelToken()
    with pytest.raises(RuntimeError, match=r"await token\.wait"):
        token.wait_sync(0.5)
    token.cancel(CancelReason.USER)
    with pytest.raises(RuntimeError, match=r"await token\.wait"):
        token.wait_sync(0.5)


def test_every_cause_has_one_stored_message() -> None:
    """Each cause MUST render its stored error type and message from the one table."""
    assert ("Cancelled", "Cancelled by user") == reason_error(CancelReason.USER)
    assert ("TaskTimeout", "Timeout of 3s exceeded") == reason_error(CancelReason.TIMEOUT,
                                                                      timeout=3)
    assert {"user", "timeout", "superseded", "shutdown"} == {r.value for r in CancelReason}


async def test_cancelling_a_running_async_handler_stops_it() -> None:
    """A cancel MUST be recorded at once; the worker in this process MUST set the token to
    ``user`` and stop the async handler at its await point, and release the lease."""
    app = make_app()
    started = asyncio.Event()
    noted = asyncio.Event()
    stopped: list[Any] = []

    @app.task
    async def job(ctx: TaskContext) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.append(ctx.cancel_reason)
            noted.set()
            raise

    async with app:
        t = await app.submit(job, None, ALICE)
        async with fast_worker(app) as worker:
            await asyncio.wait_for(started.wait(), TIMEOUT)
            snapshot = await app.cancel(t.id, ALICE)
            assert (TaskStatus.CANCELLED, CancelReason.USER) == (snapshot.status,
                                                                  snapshot.cancel_reason)
            await until(app, t.id, ALICE, lambda s: s.claim is not None and s.claim.ended)
            await asyncio.wait_for(noted.wait(), TIMEOUT)
            assert [CancelReason.USER] == stopped
            assert [] == worker.running
        assert ["cancelled"] == [r.kind for r in await app.history(t.id, ALICE)]


async def test_a_sync_handler_learns_of_a_cancel_on_the_next_heartbeat() -> None:
    """A cancel made by another process (here: another app on the same store) MUST reach
    a running sync handler through the heartbeat's renew; the handler's late result MUST
    NOT overwrite ``cancelled``."""
    store = MemoryStore(clock=ManualClock())
    app = make_app(store=store)
    client = make_app(store=store)
    started = threading.Event()
    noted = threading.Event()
    reasons: list[Any] = []

    @app.task
    def job(ctx: TaskContext) -> str:
        started.set()
        ctx.token.wait_sync(TIMEOUT)
        reasons.append(ctx.cancel_reason)
        noted.set()
        return "finished anyway"

    async with app, client:
        t = await client.submit("job", None, ALICE)
        async with fast_worker(app, lease_for=0.15):
            await asyncio.to_thread(started.wait, TIMEOUT)
            await client.cancel(t.id, ALICE)
            await until(client, t.id, ALICE, lambda s: s.claim is not None and s.claim.ended)
            assert await asyncio.to_thread(noted.wait, TIMEOUT)
        snapshot = await client.get(t.id, ALICE)
    assert [CancelReason.USER] == reasons
    assert (TaskStatus.CANCELLED, None) == (snapshot.status, snapshot.result)


async def test_a_claimed_task_cancelled_before_its_handler_ends_stays_cancelled() -> None:
    """A cancel that lands between the claim and the handler's end MUST win: the
    handler's result is refused (``unchanged``) and the lease released."""
    inner = MemoryStore(clock=ManualClock())
    store = RecordingStore(GateStore(inner))
    gate = store.inner
    assert isinstance(gate, GateStore)
    gate.armed = True
    app = make_app(store=store)

    @app.task
    async def job(ctx: TaskContext) -> str:
        return "result"

    async with app:
        t = await app.submit(job, None, ALICE)
        client = make_app(store=inner)
        async with client, fast_worker(app):
            await asyncio.wait_for(gate.entered.wait(), TIMEOUT)
            await client.cancel(t.id, ALICE)
            gate.gate.set()
            record = await store.wait_for(
                lambda r: r.event.kind == "completed" and r.result is not None
            )
            await until(app, t.id, ALICE, lambda s: s.claim is not None and s.claim.ended)
        assert record.result is not None
        assert "unchanged" == record.result.outcome
        snapshot = await app.get(t.id, ALICE)
        assert (TaskStatus.CANCELLED, None) == (snapshot.status, snapshot.result)


async def test_a_superseded_runs_late_result_is_fenced_off() -> None:
    """When a new run replaces an expired task while the old run still executes, the old
    run's token MUST get ``superseded`` and its late result MUST be refused by the store
    (LeaseLost); the new run is untouched by it."""
    clock = ManualClock()
    store = RecordingStore(MemoryStore(clock=clock))
    app = make_app(store=store)
    old_started = asyncio.Event()
    reasons: list[Any] = []

    @app.task
    async def job(ctx: TaskContext, run: int) -> int:
        if run == 1:
            old_started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                reasons.append(ctx.cancel_reason)
                return run  # a late result, after being told to stop
        return run

    async with app:
        t = await app.submit(job, {"run": 1}, ALICE, key="k", ttl=60)
        async with fast_worker(app, lease_for=0.15):
            await asyncio.wait_for(old_started.wait(), TIMEOUT)
            clock.advance(61)  # the task expires (not yet reaped): its key may run anew
            new = await app.submit(job, {"run": 2}, ALICE, key="k")
            assert "replaced" == new.outcome
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
            assert (2, new.run_id) == (done.result, done.run_id)
            fenced = await store.wait_for(
                lambda r: r.event.kind == "completed" and isinstance(r.error, LeaseLost)
            )
        assert fenced.event.event_id.startswith(t.run_id)
        assert [CancelReason.SUPERSEDED] == reasons
        after = await app.get(t.id, ALICE)
        assert (TaskStatus.COMPLETED, 2, new.run_id) == (after.status, after.result, after.run_id)


async def test_a_cancelled_handler_that_carries_on_holds_no_slot_and_can_still_await() -> None:
    """An async handler that swallows its cancel MUST NOT hold the worker's slot (another
    task runs meanwhile at ``concurrency=1``); its later awaits MUST work (the cancel is
    delivered once, at the await it was waiting in); its late result MUST NOT replace
    ``cancelled``."""
    app = make_app()
    started = asyncio.Event()
    gate = asyncio.Event()
    returned = asyncio.Event()
    steps: list[str] = []

    @app.task
    async def stubborn(ctx: TaskContext) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            steps.append("cancelled")
        await asyncio.sleep(0)
        await gate.wait()
        steps.append("returned")
        returned.set()
        return "late"

    @app.task
    async def other(ctx: TaskContext) -> str:
        return "ran"

    async with app:
        t = await app.submit(stubborn, None, ALICE)
        async with fast_worker(app, concurrency=1) as worker:
            await asyncio.wait_for(started.wait(), TIMEOUT)
            await app.cancel(t.id, ALICE)
            second = await app.submit(other, None, ALICE)
            done = await app.wait(second.id, ALICE, timeout=TIMEOUT)
            assert ("ran", ["cancelled"]) == (done.result, steps)
            gate.set()
            await until(app, t.id, ALICE, lambda s: s.claim is not None and s.claim.ended)
            await asyncio.wait_for(returned.wait(), TIMEOUT)
            assert [] == worker.running
        snapshot = await app.get(t.id, ALICE)
    assert (TaskStatus.CANCELLED, None, ["cancelled", "returned"]) == (
        snapshot.status, snapshot.result, steps)
    assert ["cancelled"] == [r.kind for r in await app.history(t.id, ALICE)]


async def test_a_cancel_a_handler_learns_of_in_its_own_write_stops_only_that_run() -> None:
    """A cancel made elsewhere that the handler learns of from its own ``request_input``
    MUST end that handler with ``RunCancelled`` and release the lease, and the worker MUST
    go on to run the next task (the stop reaches no code of the worker's)."""
    store = MemoryStore(clock=ManualClock())
    app = make_app(store=store)
    client = make_app(store=store)
    gate = asyncio.Event()
    started = asyncio.Event()
    reasons: list[Any] = []

    @app.task
    async def ask(ctx: TaskContext) -> Any:
        started.set()
        await gate.wait()
        try:
            return await ctx.request_input("go", None)
        finally:
            reasons.append(ctx.cancel_reason)

    @app.task
    async def other(ctx: TaskContext) -> str:
        return "ran"

    async with app, client:
        t = await client.submit("ask", None, ALICE)
        async with fast_worker(app, concurrency=1):
            await asyncio.wait_for(started.wait(), TIMEOUT)
            await client.cancel(t.id, ALICE)  # another app: this worker is not told
            gate.set()
            await until(client, t.id, ALICE, lambda s: s.claim is not None and s.claim.ended)
            second = await app.submit(other, None, ALICE)
            done = await app.wait(second.id, ALICE, timeout=TIMEOUT)
        snapshot = await client.get(t.id, ALICE)
    assert ([CancelReason.USER], "ran") == (reasons, done.result)
    assert (TaskStatus.CANCELLED, None) == (snapshot.status, snapshot.result)
