"""The client calls: authority, visibility, listing, history, cancel, respond, wait, watch,
release (memory store)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from _runtime_kit import ALICE, BOB, CAROL, MALLORY, TIMEOUT, fast_worker, make_app, until
from tasks_core import (
    App,
    AuthorizationError,
    InvalidInput,
    ManualClock,
    Policy,
    System,
    TaskContext,
    TaskNotFound,
    TaskStatus,
    TaskTimeout,
    Unavailable,
)
from tasks_core.models import Snapshot
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


def _app(**options: Any) -> App:
    app = make_app(**options)

    @app.task(queue="reports")
    async def job(ctx: TaskContext) -> str:
        return "done"

    @app.task
    async def asks(ctx: TaskContext) -> Any:
        return await ctx.request_input("approve", {"q": "ok?"})

    return app


CALLS: dict[str, Callable[[App, str, Any], Awaitable[Any]]] = {
    "get": lambda app, tid, *a: app.get(tid, *a),
    "history": lambda app, tid, *a: app.history(tid, *a),
    "cancel": lambda app, tid, *a: app.cancel(tid, *a),
    "respond": lambda app, tid, *a: app.respond(tid, {"k": 1}, *a),
    "wait": lambda app, tid, *a: app.wait(tid, *a),
    "release": lambda app, tid, *a: app.release(tid, *a),
    "list": lambda app, tid, *a: app.list(*a),
    "submit": lambda app, tid, *a: app.submit("job", None, *a),
    "reap": lambda app, tid, *a: app.reap(*a),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("authority", ["missing", "alice", None], ids=["missing", "str", "none"])
async def test_every_call_needs_an_authority(call: str, authority: Any) -> None:
    """Every client call MUST take the authority positionally with no default: leaving it
    out, or passing a bare string or None, MUST raise TypeError."""
    app = _app()
    async with app:
        t = await app.submit("job", None, ALICE)
        args = () if authority == "missing" else (authority,)
        with pytest.raises(TypeError):
            await CALLS[call](app, t.id, *args)


async def test_authority_cannot_be_passed_by_keyword() -> None:
    """The authority is positional-only: ``authority=`` MUST be a TypeError."""
    app = _app()
    async with app:
        with pytest.raises(TypeError):
            await app.get("x", authority=ALICE)  # type: ignore[call-arg]


async def test_invisible_and_foreign_tasks_read_as_missing_everywhere() -> None:
    """Another owner (watchers visibility) and another tenant MUST get TaskNotFound from
    get, history, cancel and respond, and see nothing in listings."""
    app = _app()
    async with app:
        t = await app.submit("job", None, ALICE)
        for stranger in (BOB, MALLORY, System("evil")):
            for call in ("get", "history", "cancel", "respond"):
                with pytest.raises(TaskNotFound):
                    await CALLS[call](app, t.id, stranger)
            assert [] == (await app.list(stranger)).items
        assert TaskStatus.PENDING == (await app.get(t.id, ALICE)).status


async def test_tenant_visibility_lets_the_tenant_read_but_not_act() -> None:
    """Under ``visibility="tenant"`` every principal of the tenant MUST read a task, but
    only members cancel or respond (AuthorizationError); other tenants see nothing."""
    app = _app(policy=Policy(visibility="tenant"))
    async with app:
        t = await app.submit("job", None, ALICE)
        assert t.id == (await app.get(t.id, BOB)).id
        assert [t.id] == [s.id for s in await app.list(BOB)]
        with pytest.raises(AuthorizationError):
            await app.cancel(t.id, BOB)
        with pytest.raises(TaskNotFound):
            await app.get(t.id, MALLORY)


async def test_system_sees_its_tenant_or_every_tenant() -> None:
    """``System()`` MUST see every tenant; ``System("t")`` only tenant t."""
    app = _app()
    async with app:
        a = await app.submit("job", None, ALICE)
        m = await app.submit("job", None, MALLORY)
        assert {a.id, m.id} == {s.id for s in await app.list(System())}
        assert [m.id] == [s.id for s in await app.list(System("evil"))]
        with pytest.raises(TaskNotFound):
            await app.get(a.id, System("evil"))


async def test_list_filters_and_pages_by_keyset() -> None:
    """Listing MUST filter by status and queue and page by id with ``next_after`` (None on
    the last page)."""
    app = _app()
    async with app:
        ids = sorted([(await app.submit("job", None, ALICE, key=f"k{i}")).id for i in range(5)])
        await app.cancel(ids[0], ALICE)
        pages: list[list[str]] = []
        after = None
        while True:
            page = await app.list(ALICE, limit=2, after=after)
            pages.append([s.id for s in page])
            if page.next_after is None:
                break
            after = page.next_after
        assert [ids[0:2], ids[2:4], ids[4:5]] == pages
        full_last = await app.list(ALICE, limit=1, after=ids[3])
        assert ([ids[4]], None) == ([s.id for s in full_last], full_last.next_after), \
            "a full page that is the last one says so"
        cancelled = await app.list(ALICE, status="cancelled")
        assert [ids[0]] == [s.id for s in cancelled]
        pending = await app.list(ALICE, status=[TaskStatus.PENDING, "running"])
        assert ids[1:] == [s.id for s in pending]
        assert [] == (await app.list(ALICE, queue="default")).items
        with pytest.raises(InvalidInput):
            await app.list(ALICE, status="nonsense")


async def test_cancel_before_start_is_never_overwritten_by_the_start() -> None:
    """A task cancelled before any worker starts it MUST stay cancelled: no worker runs
    its handler."""
    app = make_app()
    ran: list[str] = []

    @app.task
    async def job(ctx: TaskContext) -> None:
        ran.append(ctx.task_id)

    @app.task
    async def marker(ctx: TaskContext) -> None:
        ran.append("marker")

    async with app:
        t = await app.submit(job, None, ALICE)
        cancelled = await app.cancel(t.id, ALICE)
        m = await app.submit(marker, None, ALICE)
        async with fast_worker(app, concurrency=1):
            await app.wait(m.id, ALICE, timeout=10)
        snapshot = await app.get(t.id, ALICE)
        assert (TaskStatus.CANCELLED, cancelled.revision, 0) == (
            snapshot.status, snapshot.revision, snapshot.deliveries)
        assert ["marker"] == ran
        assert ["cancelled"] == [r.kind for r in await app.history(t.id, ALICE)]


async def test_cancel_of_a_finished_task_changes_nothing() -> None:
    """Cancelling a finished task MUST leave it as it is."""
    app = _app()
    async with app:
        t = await app.submit("job", None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=10)
        assert done == await app.cancel(t.id, ALICE)


async def test_history_lists_the_events_of_the_current_run() -> None:
    """History MUST list the applied events in order, with their statuses."""
    app = _app()
    async with app:
        t = await app.submit("asks", None, ALICE)
        async with fast_worker(app):
            await until(app, t.id, ALICE, lambda s: s.status == TaskStatus.WAITING_INPUT)
            await app.respond(t.id, {"approve": True}, ALICE)
            await app.wait(t.id, ALICE, timeout=10)
        history = await app.history(t.id, ALICE)
        assert [("input_requested", "waiting_input"), ("input_responses_accepted", "pending"),
                ("completed", "completed")] == [(r.kind, r.status.value) for r in history]
        assert [1, 2, 3] == [r.revision for r in history]


async def test_respond_to_no_outstanding_question_is_unchanged() -> None:
    """An answer matching no outstanding key MUST be a no-op (outcome ``unchanged``)."""
    app = _app()
    async with app:
        t = await app.submit("job", None, ALICE)
        result = await app.respond(t.id, {"nothing": 1}, ALICE)
        assert ("unchanged", 0) == (result.outcome, result.snapshot.revision)


async def test_respond_validates_answers() -> None:
    """Answers MUST be a non-empty dict of JSON by valid keys."""
    app = _app()
    async with app:
        t = await app.submit("job", None, ALICE)
        for bad in ({}, {"a::b": 1}, {"k": {1}}, "yes"):
            with pytest.raises(InvalidInput):
                await app.respond(t.id, bad, ALICE)  # type: ignore[arg-type]


async def test_only_members_respond() -> None:
    """Under tenant visibility a non-member MUST NOT respond (AuthorizationError)."""
    app = _app(policy=Policy(visibility="tenant"))
    async with app:
        t = await app.submit("asks", None, ALICE)
        with pytest.raises(AuthorizationError):
            await app.respond(t.id, {"approve": True}, CAROL)


async def test_wait_raises_timeout_error() -> None:
    """``wait`` MUST raise TaskTimeout (a TimeoutError) when the task does not end in time."""
    app = _app()
    async with app:
        t = await app.submit("job", None, ALICE)
        with pytest.raises(TaskTimeout) as info:
            await app.wait(t.id, ALICE, timeout=0.01)
        assert isinstance(info.value, TimeoutError)
        assert TaskStatus.PENDING == (await app.get(t.id, ALICE)).status


class _ReadsYield(MemoryStore):
    """A memory store whose ``get`` yields to the event loop before it reads, as every
    store behind a network or a thread does."""

    async def get(self, task_id: str, *, tenant: str | None) -> Snapshot:
        await asyncio.sleep(0)  # a suspension point, not a wait for anything
        return await super().get(task_id, tenant=tenant)


async def test_wait_with_no_time_left_answers_from_its_first_read() -> None:
    """``wait(timeout=0)`` MUST return a finished task and raise TaskNotFound for a missing
    one, however long its read takes; only a task that has not finished is TaskTimeout."""
    app = _app(store=_ReadsYield(clock=ManualClock()))
    async with app:
        finished = await app.submit("job", None, ALICE)
        await app.cancel(finished.id, ALICE)
        assert TaskStatus.CANCELLED == (await app.wait(finished.id, ALICE, timeout=0)).status
        with pytest.raises(TaskNotFound):
            await app.wait("::missing", ALICE, timeout=0)
        with pytest.raises(TaskNotFound):  # another owner's task reads as missing
            await app.wait(finished.id, BOB, timeout=0)
        unfinished = await app.submit("job", None, ALICE)
        with pytest.raises(TaskTimeout):
            await app.wait(unfinished.id, ALICE, timeout=0)


async def test_watch_yields_each_change_and_ends_after_the_terminal_one() -> None:
    """``watch`` MUST yield the current snapshot, then every change, and end after a
    terminal snapshot."""
    app = make_app()
    step = asyncio.Event()

    @app.task
    async def job(ctx: TaskContext) -> str:
        ctx.progress(50, "half")
        await step.wait()
        return "ok"

    async with app:
        t = await app.submit(job, None, ALICE)
        seen: list[tuple[str, float | None]] = []
        async with fast_worker(app):
            async for snapshot in app.watch(t.id, ALICE):
                seen.append((snapshot.status.value,
                             snapshot.progress.value if snapshot.progress else None))
                if snapshot.progress is not None:
                    step.set()
        assert ("pending", None) == seen[0]
        assert ("running", 50.0) in seen
        assert ("completed", 50.0) == seen[-1]


async def test_watch_sees_a_claim_of_a_worker_in_the_same_process_at_once() -> None:
    """A worker of the same app MUST wake its watchers when it claims (the task reads
    ``running`` then), not leave them to their next poll: a watch with an hour's poll
    sees ``running`` of a handler that reports no progress."""
    app = make_app()
    release = asyncio.Event()

    @app.task
    async def quiet(ctx: TaskContext) -> None:
        await release.wait()

    async with app:
        t = await app.submit(quiet, None, ALICE)
        seen = []
        async with fast_worker(app):
            async with asyncio.timeout(TIMEOUT):
                async for snapshot in app.watch(t.id, ALICE, poll_interval=3600):
                    seen.append(snapshot.status.value)
                    if snapshot.status != TaskStatus.PENDING:
                        release.set()
        assert ["pending", "running", "completed"] == seen


async def test_release_is_for_system_only_and_frees_a_finished_key() -> None:
    """``release`` MUST refuse owners (AuthorizationError) and live tasks (Unavailable),
    and delete a finished task so its key creates afresh."""
    app = _app()
    async with app:
        t = await app.submit("job", None, ALICE, key="k", dedup="global")
        with pytest.raises(AuthorizationError):
            await app.release(t.id, ALICE)
        with pytest.raises(Unavailable):
            await app.release(t.id, System())
        await app.cancel(t.id, ALICE)
        await app.release(t.id, System())
        with pytest.raises(TaskNotFound):
            await app.get(t.id, ALICE)
        assert "created" == (await app.submit("job", None, BOB, key="k", dedup="global")).outcome


async def test_reap_is_admin_and_removes_expired_tasks() -> None:
    """``reap`` MUST be ``System()`` only — it deletes the expired tasks of every tenant
    and answers their ids, so an operator of one tenant (``System("acme")``) is refused
    and nothing is reaped — and delete tasks past their ttl."""
    clock = ManualClock()
    app = _app(clock=clock)
    async with app:
        t = await app.submit("job", None, ALICE, ttl=60)
        keep = await app.submit("job", None, ALICE)
        with pytest.raises(AuthorizationError):
            await app.reap(ALICE)
        assert [] == await app.reap(System())
        clock.advance(61)
        with pytest.raises(AuthorizationError):
            await app.reap(System("acme"))
        assert [t.id] == await app.reap(System())
        assert [keep.id] == [s.id for s in await app.list(ALICE)]


@pytest.mark.parametrize(("args", "options"), [
    ((), {"store": "sqlite:///tasks.db"}),
    ((), {"store": object()}),
    ((b"memory://",), {}),
])
def test_an_app_refuses_a_store_of_the_wrong_kind_when_it_is_made(
    args: tuple[Any, ...], options: dict[str, Any]
) -> None:
    """``App(store=…)`` MUST be given a store object and ``App(url)`` a str: anything else
    is a TypeError when the app is made, not a failure at its first call."""
    with pytest.raises(TypeError) as info:
        App(*args, **options)
    if isinstance(options.get("store"), str):
        assert "App('sqlite:///tasks.db')" in str(info.value)  # says how to give a URL
