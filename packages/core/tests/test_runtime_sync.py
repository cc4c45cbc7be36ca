"""The sync facade: ``app.sync.…`` for Django/Flask callers, one adapter over the async API."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from typing import Any

import pytest
from _runtime_kit import ALICE, BOB, TIMEOUT, DelegatingStore, fast_worker, make_app
from tasks_core import App, AuthorizationError, Policy, TaskContext, TaskNotFound, TaskStatus
from tasks_store_memory import MemoryStore


def _app(**options: Any) -> App:
    app = make_app(**options)

    @app.task
    async def job(ctx: TaskContext, n: int = 0) -> int:
        return n

    return app


def test_sync_calls_work_without_an_event_loop() -> None:
    """From plain sync code the facade MUST submit, read, list, cancel, respond and read
    history, opening the store on its own loop."""
    app = _app()
    try:
        t = app.sync.submit("job", {"n": 1}, ALICE, key="k")
        assert ("created", "alice::k") == (t.outcome, t.id)
        assert t.id == app.sync.get(t.id, ALICE).id
        assert [t.id] == [s.id for s in app.sync.list(ALICE)]
        assert "unchanged" == app.sync.respond(t.id, {"x": 1}, ALICE).outcome
        assert TaskStatus.CANCELLED == app.sync.cancel(t.id, ALICE).status
        assert ["cancelled"] == [r.kind for r in app.sync.history(t.id, ALICE)]
        assert TaskStatus.CANCELLED == app.sync.wait(t.id, ALICE, timeout=TIMEOUT).status
        with pytest.raises(TaskNotFound):
            app.sync.get(t.id, BOB)
    finally:
        app.sync.close()


def test_sync_calls_need_an_authority() -> None:
    """The facade MUST keep the rule: a missing or bare-string authority is a TypeError."""
    app = _app()
    try:
        with pytest.raises(TypeError):
            app.sync.get("x")  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            app.sync.submit("job", None, "alice")  # type: ignore[arg-type]
    finally:
        app.sync.close()


def test_sync_submit_applies_the_queue_authorizer() -> None:
    """The queue authorizer MUST run on the sync path as on the async one."""
    app = _app(policy=Policy(queue_authorizer=lambda queue, owner: owner == ALICE))
    try:
        app.sync.submit("job", None, ALICE)
        with pytest.raises(AuthorizationError):
            app.sync.submit("job", None, BOB)
    finally:
        app.sync.close()


@pytest.mark.anyio
async def test_sync_calls_from_a_thread_use_the_apps_running_loop() -> None:
    """When the app is open on a running loop, sync calls from another thread MUST run on
    that loop (a worker there completes what they submit); on the loop's own thread they
    MUST raise RuntimeError instead of deadlocking."""
    app = _app()
    async with app:
        async with fast_worker(app):
            result: list[Any] = []

            def view() -> None:
                t = app.sync.submit("job", {"n": 7}, ALICE)
                result.append(app.sync.wait(t.id, ALICE, timeout=TIMEOUT).result)

            thread = threading.Thread(target=view)
            thread.start()
            await asyncio.to_thread(thread.join, TIMEOUT)
            assert [7] == result
            with pytest.raises(RuntimeError, match="own event loop"):
                app.sync.get("x", ALICE)


@pytest.mark.anyio
async def test_sync_watch_yields_every_change_until_the_task_ends() -> None:
    """``app.sync.watch`` MUST be :meth:`App.watch` for sync code: an iterator of the
    task's snapshots, each step blocking for the next change, ending by itself after the
    terminal one; a task the caller cannot see is ``TaskNotFound``, as a missing one."""
    app = make_app()
    seen_running = threading.Event()

    @app.task
    async def job(ctx: TaskContext) -> str:
        ctx.progress(50, "half")
        await asyncio.to_thread(seen_running.wait, TIMEOUT)
        return "done"

    async with app:
        t = await app.submit(job, None, ALICE)
        async with fast_worker(app):
            statuses: list[TaskStatus] = []

            def view() -> None:
                for snapshot in app.sync.watch(t.id, ALICE, poll_interval=0.01):
                    statuses.append(snapshot.status)
                    if snapshot.status == TaskStatus.RUNNING:
                        seen_running.set()
                with pytest.raises(TaskNotFound):
                    next(app.sync.watch(t.id, BOB))

            thread = threading.Thread(target=view)
            thread.start()
            await asyncio.to_thread(thread.join, TIMEOUT)
            assert not thread.is_alive()
    assert TaskStatus.RUNNING in statuses
    assert TaskStatus.COMPLETED == statuses[-1]


class _ReadSeen(DelegatingStore):
    """Sets ``read`` at each ``get``: a call is in flight on the loop."""

    def __init__(self) -> None:
        super().__init__(MemoryStore())
        self.read = threading.Event()

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        self.read.set()
        return await self.inner.get(*args, **kwargs)


def test_close_ends_the_calls_in_flight_with_a_named_error() -> None:
    """``app.sync.close()`` while another thread's call runs on the private loop MUST end
    that call at once with ``RuntimeError`` saying the facade was closed — it blocked
    forever, past its own timeout — and then close the store."""
    store = _ReadSeen()
    app = _app(store=store)
    t = app.sync.submit("job", None, ALICE)  # pending: no worker
    outcome: list[BaseException | None] = []

    def waits() -> None:
        try:
            app.sync.wait(t.id, ALICE, timeout=TIMEOUT * 6)
        except BaseException as exc:  # the outcome under test
            outcome.append(exc)
        else:
            outcome.append(None)

    store.read.clear()
    thread = threading.Thread(target=waits)
    thread.start()
    assert store.read.wait(TIMEOUT)
    app.sync.close()
    thread.join(TIMEOUT)
    assert not thread.is_alive()
    [error] = outcome
    assert isinstance(error, RuntimeError)
    assert "app.sync.close()" in str(error)


def test_a_sync_call_inside_another_running_loop_warns_that_it_blocks_it() -> None:
    """``app.sync`` called from a coroutine of an event loop that is not the app's (an async
    view calling sync helpers) works but blocks that loop for the call: it MUST say so with
    a ``RuntimeWarning`` saying to await the async method instead."""
    app = _app()

    async def inside_a_loop() -> str:
        return app.sync.submit("job", None, ALICE).id

    try:
        with pytest.warns(RuntimeWarning, match="blocks the event loop running in this thread"):
            task_id = asyncio.run(inside_a_loop())
        assert task_id == app.sync.get(task_id, ALICE).id
    finally:
        app.sync.close()


def test_a_sync_watch_left_early_ends_on_the_loop() -> None:
    """Leaving a sync watch before the task ends MUST close the watch on the app's loop
    (the facade goes on serving calls); its first step reads the task as ``get`` does."""
    app = _app()
    try:
        t = app.sync.submit("job", None, ALICE)
        changes = app.sync.watch(t.id, ALICE)
        assert TaskStatus.PENDING == next(changes).status
        changes.close()
        with pytest.raises(StopIteration):
            next(changes)
        assert TaskStatus.PENDING == app.sync.get(t.id, ALICE).status
    finally:
        app.sync.close()


def test_sync_refused_on_a_stopped_loop_leaves_no_unawaited_coroutine() -> None:
    """A sync call refused because the app was opened on a loop that no longer runs MUST
    raise its RuntimeError and nothing else (no "coroutine … was never awaited"
    warning)."""
    app = _app()
    t = asyncio.run(app.submit("job", None, ALICE))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="not running"):
            app.sync.get(t.id, ALICE)
        gc.collect()
    assert [] == [str(w.message) for w in caught if "never awaited" in str(w.message)]


def test_a_tenant_member_refused_an_answer_reads_a_plain_refusal() -> None:
    """Under ``visibility="tenant"`` a member who is not owner or watcher MUST be refused
    ``respond`` with a message in plain words."""
    app = _app(policy=Policy(visibility="tenant"))
    try:
        t = app.sync.submit("job", None, ALICE)
        with pytest.raises(AuthorizationError, match=r"^Not authorized to respond to this task$"):
            app.sync.respond(t.id, {"x": 1}, BOB)
    finally:
        app.sync.close()


def test_a_call_that_reaches_the_loop_while_close_runs_is_refused() -> None:
    """A call whose thread picked the private loop just before ``app.sync.close()`` began,
    and schedules on it while close runs, MUST be refused with the same named
    ``RuntimeError`` — it ran on a store being closed, or blocked forever once the loop
    stopped under it — and run nothing."""
    app = _app()
    app.sync.submit("job", None, ALICE)  # the private loop and the store are open
    facade = app.sync
    closing, go = threading.Event(), threading.Event()
    app_aclose = app.aclose

    async def slow_aclose() -> None:
        closing.set()
        await asyncio.to_thread(go.wait, TIMEOUT)
        await app_aclose()

    app.aclose = slow_aclose  # type: ignore[method-assign]
    picked, proceed = threading.Event(), threading.Event()
    pick = facade._loop

    def picks_then_pauses() -> asyncio.AbstractEventLoop:
        loop = pick()
        picked.set()
        assert proceed.wait(TIMEOUT)
        return loop

    facade._loop = picks_then_pauses  # type: ignore[method-assign]
    outcome: list[BaseException | object] = []

    def submits() -> None:
        try:
            outcome.append(facade.submit("job", {"n": 2}, ALICE))
        except BaseException as exc:  # the outcome under test
            outcome.append(exc)

    caller = threading.Thread(target=submits)
    caller.start()
    assert picked.wait(TIMEOUT)
    closer = threading.Thread(target=facade.close)
    closer.start()
    assert closing.wait(TIMEOUT)
    proceed.set()
    caller.join(TIMEOUT)
    go.set()
    closer.join(TIMEOUT)
    assert not caller.is_alive()
    assert not closer.is_alive()
    [error] = outcome
    assert isinstance(error, RuntimeError), error
    assert "app.sync.close()" in str(error)
