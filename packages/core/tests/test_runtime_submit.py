"""Submit: ids and dedup, joining, new runs, watchers, queues, limits (memory store)."""

from __future__ import annotations

from typing import Any

import pytest
from _runtime_kit import ALICE, BOB, CAROL, MALLORY, fast_worker, make_app
from tasks_core import (
    App,
    AuthorizationError,
    CapabilityNotSupported,
    CapacityExceeded,
    InvalidInput,
    Limits,
    ManualClock,
    Owner,
    Policy,
    RetryPolicy,
    System,
    TaskContext,
    TaskNotFound,
    TaskStatus,
    random_task_id,
)
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


def _app(**options: Any) -> App:
    app = make_app(**options)

    @app.task(queue="reports", retry=RetryPolicy.fixed(1.0, attempts=3), timeout=12,
              max_deliveries=7)
    async def report(ctx: TaskContext, month: str = "x") -> str:
        return month

    return app


async def test_two_owners_with_one_key_get_different_ids_and_cannot_see_each_other() -> None:
    """The same key submitted by two owners MUST make two tasks, each invisible to the
    other owner (TaskNotFound, exactly like a missing task)."""
    app = _app()
    async with app:
        a = await app.submit("report", {"month": "11"}, ALICE, key="r-11")
        b = await app.submit("report", {"month": "11"}, BOB, key="r-11")
        assert ("alice::r-11", "bob::r-11") == (a.id, b.id)
        assert ("created", "created") == (a.outcome, b.outcome)
        with pytest.raises(TaskNotFound) as seen:
            await app.get(a.id, BOB)
        with pytest.raises(TaskNotFound) as missing:
            await app.get("alice::nothing", BOB)
        assert str(missing.value).replace("alice::nothing", "X") == str(seen.value).replace(
            a.id, "X"
        )
        assert [b.id] == [s.id for s in await app.list(BOB)]


async def test_owner_key_in_another_tenant_gets_a_tenant_scoped_id() -> None:
    """An owner of another tenant MUST get an id scoped to that tenant as well."""
    app = _app()
    async with app:
        m = await app.submit("report", None, MALLORY, key="r-11")
        assert "evil::mallory::r-11" == m.id
        assert "evil" == m.snapshot.tenant


async def test_resubmitting_a_live_key_joins_the_same_run() -> None:
    """Submitting a live key again MUST return the live run (outcome ``joined``), not a
    second task, and ignore the new input."""
    app = _app()
    async with app:
        first = await app.submit("report", {"month": "11"}, ALICE, key="r")
        again = await app.submit("report", {"month": "12"}, ALICE, key="r")
        assert ("joined", first.id, first.run_id) == (again.outcome, again.id, again.run_id)
        assert {"month": "11"} == (await app.get(first.id, ALICE)).work.input


async def test_resubmitting_a_key_claimed_ahead_joins_the_same_run() -> None:
    """A task a worker holds ahead of a free slot (``claimed``) is live: submitting its
    key again MUST join it, and a listing of live work MUST count it."""
    app = _app(limits=Limits(max_runs_per_owner=1))
    async with app:
        first = await app.submit("report", {"month": "11"}, ALICE, key="r")
        (held,) = await app.store.claim_next("w1", 30, queues=["reports"], start=0)
        assert TaskStatus.CLAIMED == (await app.get(first.id, ALICE)).status
        again = await app.submit("report", {"month": "12"}, ALICE, key="r")
        assert ("joined", first.run_id) == (again.outcome, again.run_id)
        with pytest.raises(CapacityExceeded):
            await app.submit("report", {"month": "12"}, ALICE, key="other")
        assert held.snapshot.id == first.id


async def test_resubmitting_a_finished_key_starts_a_new_run() -> None:
    """A finished key MUST be replaced by a new run: new run_id, fresh history, new input."""
    app = _app()
    async with app:
        first = await app.submit("report", {"month": "11"}, ALICE, key="r")
        await app.cancel(first.id, ALICE)
        again = await app.submit("report", {"month": "12"}, ALICE, key="r")
        assert ("replaced", first.id) == (again.outcome, again.id)
        assert first.run_id != again.run_id
        snapshot = await app.get(first.id, ALICE)
        assert (TaskStatus.PENDING, {"month": "12"}) == (snapshot.status, snapshot.work.input)
        assert [] == await app.history(first.id, ALICE)


@pytest.mark.parametrize("finished", [False, True])
async def test_joining_a_foreign_global_key_is_refused(finished: bool) -> None:
    """Without the watch authorizer's approval, joining a global key owned by someone else
    MUST raise AuthorizationError, whether the task is live or finished, and change
    nothing."""
    app = _app()
    async with app:
        mine = await app.submit("report", None, ALICE, key="nightly", dedup="global")
        if finished:
            await app.cancel(mine.id, ALICE)
        before = await app.get(mine.id, ALICE)
        with pytest.raises(AuthorizationError):
            await app.submit("report", None, BOB, key="nightly", dedup="global")
        assert before == await app.get(mine.id, ALICE)
        with pytest.raises(TaskNotFound):
            await app.get(mine.id, BOB)


async def test_a_global_key_never_names_a_task_submitted_without_a_key() -> None:
    """A global key equal to the id of someone's key-less task MUST be refused exactly as
    for an id nobody uses — before anything is written — not answered with that task
    (no existence oracle; an approving watch authorizer must not let a stranger join it or
    re-run it with his input)."""
    app = _app(policy=Policy(watch_authorizer=lambda task_id, watchers, owner: True))
    async with app:
        private = await app.submit("report", {"month": "11"}, ALICE)
        unused = random_task_id()
        refusals = []
        for key in (private.id, unused):
            with pytest.raises(InvalidInput) as refused:
                await app.submit("report", {"month": "12"}, BOB, key=key, dedup="global")
            refusals.append(str(refused.value).replace(key, "KEY"))
        assert refusals[0] == refusals[1]
        assert private.snapshot == await app.get(private.id, ALICE)
        with pytest.raises(TaskNotFound):
            await app.get(unused, System())


async def test_watch_authorizer_lets_a_submitter_join_a_live_global_key() -> None:
    """An approved join MUST add the submitter as a watcher of the live run; the
    authorizer MUST be asked with (task_id, newcomers, submitter)."""
    asked: list[tuple[Any, ...]] = []

    def allow(task_id: str, newcomers: tuple[Any, ...], submitter: Any) -> bool:
        asked.append((task_id, newcomers, submitter))
        return True

    app = _app(policy=Policy(watch_authorizer=allow))
    async with app:
        mine = await app.submit("report", None, ALICE, key="nightly", dedup="global")
        joined = await app.submit("report", None, BOB, key="nightly", dedup="global")
        assert ("joined", mine.run_id) == (joined.outcome, joined.run_id)
        assert [("nightly", (BOB,), BOB)] == asked
        assert (BOB,) == (await app.get(mine.id, BOB)).watchers
        again = await app.submit("report", None, BOB, key="nightly", dedup="global")
        assert "joined" == again.outcome
        assert 1 == len(asked), "an existing watcher needs no new approval"


async def test_approved_rerun_of_a_finished_global_key_keeps_the_owner() -> None:
    """A new run of someone else's finished key MUST keep its owner and add the submitter
    as a watcher."""
    app = _app(policy=Policy(watch_authorizer=lambda *_: True))
    async with app:
        mine = await app.submit("report", None, ALICE, key="nightly", dedup="global")
        await app.cancel(mine.id, ALICE)
        rerun = await app.submit("report", None, BOB, key="nightly", dedup="global")
        assert "replaced" == rerun.outcome
        assert (ALICE, (BOB,)) == (rerun.snapshot.owner, rerun.snapshot.watchers)


async def test_a_raising_watch_authorizer_denies() -> None:
    """A watch authorizer that raises MUST deny (AuthorizationError)."""

    def broken(*_: Any) -> bool:
        raise RuntimeError("bug")

    app = _app(policy=Policy(watch_authorizer=broken))
    async with app:
        await app.submit("report", None, ALICE, key="k", dedup="global")
        with pytest.raises(AuthorizationError):
            await app.submit("report", None, BOB, key="k", dedup="global")


async def test_global_keys_are_separate_per_tenant() -> None:
    """The same global key in two tenants MUST name two different tasks: another tenant's
    submit neither joins nor learns of the first (no cross-tenant existence oracle)."""
    app = _app(policy=Policy(watch_authorizer=lambda *_: True))
    async with app:
        mine = await app.submit("report", None, ALICE, key="k", dedup="global")
        theirs = await app.submit("report", None, MALLORY, key="k", dedup="global")
        assert ("created", "created") == (mine.outcome, theirs.outcome)
        assert mine.id != theirs.id
        with pytest.raises(TaskNotFound):
            await app.get(mine.id, MALLORY)


async def test_watcher_granted_at_submit_can_read_and_cancel() -> None:
    """``watchers=`` MUST grant read and cancel; others still see nothing."""
    app = _app()
    async with app:
        t = await app.submit("report", None, ALICE, watchers=[BOB])
        assert t.id == (await app.get(t.id, BOB)).id
        assert [t.id] == [s.id for s in await app.list(BOB)]
        assert TaskStatus.CANCELLED == (await app.cancel(t.id, BOB)).status
        with pytest.raises(TaskNotFound):
            await app.get(t.id, CAROL)


async def test_watchers_must_be_owners_of_the_same_tenant() -> None:
    """A watcher of another tenant, or not an Owner, MUST be refused before anything is
    written."""
    app = _app()
    async with app:
        with pytest.raises(InvalidInput):
            await app.submit("report", None, ALICE, key="k", watchers=[MALLORY])
        with pytest.raises(InvalidInput):
            await app.submit("report", None, ALICE, key="k", watchers=["bob"])  # type: ignore[list-item]
        with pytest.raises(TaskNotFound):
            await app.get("alice::k", ALICE)


async def test_joining_owner_who_adds_watchers_grants_them() -> None:
    """The owner re-submitting a live key with new watchers MUST grant them."""
    app = _app()
    async with app:
        await app.submit("report", None, ALICE, key="k")
        joined = await app.submit("report", None, ALICE, key="k", watchers=[BOB])
        assert ("joined", (BOB,)) == (joined.outcome, joined.snapshot.watchers)


async def test_a_watcher_cannot_grant_further_watchers_without_approval() -> None:
    """A watcher re-submitting a key with new watchers MUST need the watch authorizer."""
    app = _app()
    async with app:
        await app.submit("report", None, ALICE, key="k", dedup="global", watchers=[BOB])
        assert "joined" == (await app.submit("report", None, BOB, key="k",
                                             dedup="global")).outcome
        with pytest.raises(AuthorizationError):
            await app.submit("report", None, BOB, key="k", dedup="global", watchers=[CAROL])


async def test_undeclared_queue_is_refused() -> None:
    """A queue named in request data MUST be refused unless declared."""
    app = _app()
    async with app:
        with pytest.raises(InvalidInput, match="not declared"):
            await app.submit("report", None, ALICE, queue="made-up")
        assert [] == (await app.list(System())).items


async def test_declared_queues_come_from_decorators_and_the_app() -> None:
    """Queues of ``@app.task(queue=…)`` and ``App(queues=…)`` MUST be declared, plus
    ``default``."""
    app = _app(queues=["emails"])
    assert {"default", "emails", "reports"} == set(app.queues)
    async with app:
        t = await app.submit("report", None, ALICE, queue="emails")
        assert "emails" == t.snapshot.queue


async def test_queue_authorizer_denies_and_a_raising_one_denies_too() -> None:
    """The queue authorizer MUST be asked ``(queue, owner)``; ``False`` or an exception
    refuses the submit; System is not asked."""
    asked: list[tuple[str, Any]] = []

    def only_alice(queue: str, owner: Owner) -> bool:
        asked.append((queue, owner))
        if owner == CAROL:
            raise RuntimeError("bug")
        return owner == ALICE

    app = _app(policy=Policy(queue_authorizer=only_alice))
    async with app:
        await app.submit("report", None, ALICE)
        with pytest.raises(AuthorizationError):
            await app.submit("report", None, BOB)
        with pytest.raises(AuthorizationError):
            await app.submit("report", None, CAROL)
        await app.submit("report", None, System())
        assert [("reports", ALICE), ("reports", BOB), ("reports", CAROL)] == asked
        assert 2 == len((await app.list(System())).items)


async def test_input_over_the_limit_is_refused_before_anything_is_written() -> None:
    """Input above ``max_input_bytes`` MUST raise InvalidInput and store nothing; the
    default limit MUST be 256 KiB."""
    assert 256 * 1024 == Limits().max_input_bytes
    app = _app(limits=Limits(max_input_bytes=100))
    async with app:
        with pytest.raises(InvalidInput, match="100 bytes"):
            await app.submit("report", {"month": "x" * 100}, ALICE, key="big")
        await app.submit("report", {"month": "x" * 50}, ALICE, key="small")
        assert ["alice::small"] == [s.id for s in await app.list(ALICE)]


@pytest.mark.parametrize(
    "payload",
    [{"month": {1, 2}}, {"month": float("nan")}, {"unknown_arg": 1}, ["11"]],
    ids=["set", "nan", "bad-argument", "not-a-dict"],
)
async def test_bad_input_is_refused(payload: Any) -> None:
    """Input that is not JSON, not a dict, or does not bind to the handler MUST raise
    InvalidInput."""
    app = _app()
    async with app:
        with pytest.raises(InvalidInput):
            await app.submit("report", payload, ALICE)


async def test_input_that_bound_once_binds_again_and_other_keys_are_still_refused() -> None:
    """Keys that bound to the handler once MUST bind again, and keys that did not, or
    that miss a required argument, MUST still be refused each time — also after; a
    handler with ``**kwargs`` MUST take any keys."""
    app = _app()

    @app.task()
    async def needs(ctx: TaskContext, a: int, b: int = 0) -> None:
        return None

    @app.task()
    async def anything(ctx: TaskContext, a: int, **rest: int) -> None:
        return None

    async with app:
        for _ in range(2):
            await app.submit("needs", {"a": 1}, ALICE)
            await app.submit("needs", {"b": 2, "a": 1}, ALICE)
            for payload, problem in (({"a": 1, "c": 3}, "unexpected keyword argument 'c'"),
                                     ({"b": 1}, "missing a required argument: 'a'"),
                                     (None, "missing a required argument: 'a'")):
                with pytest.raises(InvalidInput, match=problem):
                    await app.submit("needs", payload, ALICE)
            await app.submit("anything", {"a": 1, "z": 2}, ALICE)
            await app.submit("anything", {"a": 1, "y": 2}, ALICE)
            with pytest.raises(InvalidInput, match="missing a required argument: 'a'"):
                await app.submit("anything", {"y": 2}, ALICE)
        assert 8 == len(await app.list(ALICE))


@pytest.mark.parametrize("key", ["a::b", "", "x" * 257])
async def test_bad_keys_are_refused(key: str) -> None:
    """Keys with ``::``, empty or longer than 256 bytes MUST be refused."""
    app = _app()
    async with app:
        with pytest.raises(InvalidInput):
            await app.submit("report", None, ALICE, key=key)


@pytest.mark.parametrize("count", [0, -1, True])
async def test_a_delivery_limit_out_of_range_is_refused(count: int) -> None:
    """``max_deliveries`` below 1 (or not an integer) MUST raise InvalidInput and store
    nothing, never fall back to the task's default."""
    app = _app()
    async with app:
        with pytest.raises(InvalidInput, match="max_deliveries"):
            await app.submit("report", None, ALICE, max_deliveries=count)
        assert [] == (await app.list(System())).items


async def test_system_needs_global_dedup_for_keys() -> None:
    """System has no owner scope: a key MUST use ``dedup="global"``."""
    app = _app()
    async with app:
        with pytest.raises(InvalidInput, match="global"):
            await app.submit("report", None, System(), key="k")
        t = await app.submit("report", None, System(), key="k", dedup="global")
        assert ("k", None) == (t.id, t.snapshot.owner)


async def test_task_defaults_reach_the_stored_work_and_submit_overrides_them() -> None:
    """The decorator's retry, timeout and delivery limit MUST be stored with the task;
    submit options MUST override them."""
    app = _app()
    async with app:
        t = await app.submit("report", None, ALICE)
        work = t.snapshot.work
        assert (RetryPolicy.fixed(1.0, attempts=3), 12, 7) == (
            work.retry_policy, work.timeout_s, work.max_deliveries)
        o = await app.submit("report", None, ALICE, timeout=None, max_deliveries=2,
                             retry=RetryPolicy.none(), ttl=60, retention=5)
        assert (None, 2, 1, 60, 5) == (o.snapshot.work.timeout_s, o.snapshot.work.max_deliveries,
                                       o.snapshot.work.retry_policy.attempts, o.snapshot.ttl_s,
                                       o.snapshot.retention_s)


async def test_store_capacity_is_refused_with_capacity_exceeded() -> None:
    """A full store MUST refuse with CapacityExceeded (retryable) and store nothing."""
    app = _app(store=MemoryStore(clock=ManualClock(), max_tasks=1))
    async with app:
        await app.submit("report", None, ALICE)
        with pytest.raises(CapacityExceeded) as refused:
            await app.submit("report", None, ALICE)
        assert (True, "max_tasks") == (refused.value.retryable, refused.value.limit)


async def test_max_runs_per_owner_refuses_beyond_the_limit() -> None:
    """``max_runs_per_owner`` MUST count the owner's live tasks only; joining its own
    live key is not a new run."""
    app = _app(limits=Limits(max_runs_per_owner=2))
    async with app:
        a = await app.submit("report", None, ALICE, key="a")
        await app.submit("report", None, ALICE, key="b")
        assert "joined" == (await app.submit("report", None, ALICE, key="a")).outcome
        with pytest.raises(CapacityExceeded) as refused:
            await app.submit("report", None, ALICE, key="c")
        assert "max_runs_per_owner" == refused.value.limit
        await app.submit("report", None, BOB, key="c")
        await app.cancel(a.id, ALICE)
        await app.submit("report", None, ALICE, key="c")
    assert Limits().max_runs_per_owner is None


@pytest.mark.parametrize("limit", ["max_tasks", "max_active_tasks_per_scope"])
async def test_store_limits_an_app_cannot_apply_to_its_given_store_are_refused(
    limit: str,
) -> None:
    """``max_tasks`` and ``max_active_tasks_per_scope`` are enforced by the store, and
    an ``App`` passes them on only to a store it opens itself: given a store, an ``App``
    whose limits set one to other than the store's own MUST be refused with
    ``InvalidInput`` (never ignored), and one that agrees with the store (or leaves the
    default) MUST be accepted."""
    with pytest.raises(InvalidInput, match=f"{limit}=1 .*where the store is opened"):
        App(store=MemoryStore(), limits=Limits(**{limit: 1}))
    app = App(store=MemoryStore(**{limit: 1}), limits=Limits(**{limit: 1}))
    async with app:
        await app.submit("report", None, ALICE)
        with pytest.raises(CapacityExceeded):
            await app.submit("report", None, ALICE)
    App(store=MemoryStore(**{limit: 5}), limits=Limits(max_input_bytes=10))


async def test_submit_by_name_of_an_unregistered_task_fails_it_in_the_worker() -> None:
    """A name no worker knows MUST be accepted by submit (clients need not import
    handlers) and failed by the worker with UnknownTask, never retried."""
    app = _app()
    async with app:
        t = await app.submit("not_here", None, ALICE, retry=RetryPolicy.fixed(0, attempts=5))
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=10)
        assert (TaskStatus.FAILED, "UnknownTask") == (done.status, done.error and done.error.type)


def test_a_task_name_registers_once() -> None:
    """Registering a second task under the same name MUST be refused."""
    app = _app()
    with pytest.raises(InvalidInput, match="already registered"):

        @app.task(name="report")
        def other(ctx: TaskContext) -> None: ...


async def test_a_task_of_another_app_is_refused() -> None:
    """Submitting a TaskDef registered with another App MUST be refused."""
    app, other = _app(), _app()
    async with app:
        with pytest.raises(InvalidInput, match="not registered"):
            await app.submit(other.tasks["report"], None, ALICE)


async def test_taskdef_submit_shortcut_and_direct_call() -> None:
    """``task.submit(...)`` MUST submit through its app; calling a TaskDef MUST call the
    handler directly."""
    app = _app()

    @app.task
    def double(ctx: TaskContext, n: int) -> int:
        return 2 * n

    assert 4 == double(None, n=2)
    async with app:
        t = await double.submit({"n": 2}, ALICE)
        assert "double" == t.snapshot.work.name


async def test_submit_in_a_transaction_is_refused_by_a_store_without_transactions() -> None:
    """``submit(..., transaction=…)`` on a store without ``transactional_submit`` MUST
    raise ``CapabilityNotSupported`` and store nothing (it could not keep "exists if and
    only if your transaction commits")."""
    app = _app()
    async with app:
        with pytest.raises(CapabilityNotSupported, match="transactional_submit"):
            await app.submit("report", {"month": "11"}, ALICE, key="r-tx",
                             transaction=object())
        assert [] == (await app.list(System())).items


async def test_an_empty_queue_is_refused_not_taken_for_the_tasks_queue() -> None:
    """``queue=""`` MUST be refused (``InvalidInput``, nothing stored), never read as
    "the task's own queue"."""
    app = _app()
    async with app:
        with pytest.raises(InvalidInput, match="queue"):
            await app.submit("report", None, ALICE, queue="")
        assert [] == (await app.list(System())).items
