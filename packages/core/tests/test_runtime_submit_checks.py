"""Submit's checks: queues, input, keys, limits, task defaults, registration (memory store)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from _runtime_kit import ALICE, BOB, CAROL, fast_worker
from _runtime_kit import reports_app as _app
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
    TaskStatus,
)
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


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


@pytest.mark.parametrize("key", ["a::b", "", " ", "\t ", "x" * 257, " lead", "trail ",
                                 "tab\t"])
async def test_bad_keys_are_refused(key: str) -> None:
    """Keys with ``::``, empty, blank (whitespace alone), beginning or ending with
    whitespace (a key read from a form field with a stray space would make a second task)
    or longer than 256 bytes MUST be refused, nothing written."""
    app = _app()
    async with app:
        with pytest.raises(InvalidInput, match=r"^key must"):
            await app.submit("report", None, ALICE, key=key)
        assert [] == (await app.list(System())).items


@pytest.mark.parametrize("count", [0, -1, True])
async def test_a_delivery_limit_out_of_range_is_refused(count: int) -> None:
    """``max_deliveries`` below 1 (or not an integer) MUST raise InvalidInput and store
    nothing, never fall back to the task's default."""
    app = _app()
    async with app:
        with pytest.raises(InvalidInput, match="max_deliveries"):
            await app.submit("report", None, ALICE, max_deliveries=count)
        assert [] == (await app.list(System())).items


@pytest.mark.parametrize(("call", "what", "most", "given"), [
    (lambda app: app.submit("report", None, ALICE, max_deliveries=0), "max_deliveries",
     100_000, "0"),
    (lambda app: app.submit("report", None, ALICE, max_deliveries=10**7), "max_deliveries",
     100_000, "10000000"),
    (lambda app: app.task(name="other", max_deliveries=0)(lambda ctx: None), "max_deliveries",
     100_000, "0"),
    (lambda app: RetryPolicy.fixed(1, attempts=0), "attempts", 10_000, "0"),
    (lambda app: RetryPolicy.exponential(1, attempts=10_001), "attempts", 10_000, "10001"),
], ids=["submit-0", "submit-huge", "task-0", "fixed-0", "exponential-huge"])
async def test_a_count_out_of_range_is_refused_naming_its_range_and_value(
    call: Any, what: str, most: int, given: str
) -> None:
    """``max_deliveries`` and ``attempts`` are counts like every other (``check_limit``):
    a refusal MUST read ``<what> must be an integer in 1..<most>, not <given>``, as a
    priority's does — not pydantic's "Input should be greater than or equal to 1"."""
    app = _app()
    async with app:
        with pytest.raises(InvalidInput, match=rf"^{what} must be an integer in 1\.\.{most}, "
                                               rf"not {given}$"):
            await _called(call, app)
        assert [] == (await app.list(System())).items


async def _called(call: Any, app: App) -> None:
    """``call(app)``, awaited when it is a coroutine."""
    result = call(app)
    if asyncio.iscoroutine(result):
        await result


async def test_a_system_submit_lands_in_its_own_tenant_or_default() -> None:
    """A ``System("acme")`` submit MUST create its task in ``acme``, and a ``System()``
    submit (no tenant of its own) in ``default``."""
    app = _app()
    async with app:
        scoped = await app.submit("report", None, System("acme"))
        unscoped = await app.submit("report", None, System())
        assert ("acme", "default") == (scoped.snapshot.tenant, unscoped.snapshot.tenant)


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


async def test_submit_by_name_of_an_unregistered_task_fails_it_in_the_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A name no worker knows MUST be accepted by submit (clients need not import
    handlers) and failed by the worker with UnknownTask, never retried — and the worker
    MUST say so at WARNING, naming the task and the name (a deploy that forgot a module
    fails every such task, and only a count in the summary line told)."""
    app = _app()
    async with app:
        t = await app.submit("not_here", None, ALICE, retry=RetryPolicy.fixed(0, attempts=5))
        with caplog.at_level(logging.WARNING, logger="tasks_core.worker"):
            async with fast_worker(app):
                done = await app.wait(t.id, ALICE, timeout=10)
        assert (TaskStatus.FAILED, "UnknownTask") == (done.status, done.error and done.error.type)
    said = [r for r in caplog.records if r.name == "tasks_core.worker"
            and repr(t.id) in r.getMessage() and "'not_here'" in r.getMessage()]
    assert [logging.WARNING] == [r.levelno for r in said]


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
