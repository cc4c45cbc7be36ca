"""Input requests: answered in the slot, parked and re-run with the stored answer."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from _runtime_kit import ALICE, BOB, TIMEOUT, fast_worker, make_app, until
from tasks_core import CancelReason, InvalidInput, RunCancelled, TaskContext, TaskStatus

pytestmark = pytest.mark.anyio


async def test_an_answer_within_the_park_time_resumes_the_same_run() -> None:
    """An answer that arrives while the run waits MUST be returned by ``request_input``
    in the same delivery."""
    app = make_app()

    @app.task
    async def ask(ctx: TaskContext) -> Any:
        answer = await ctx.request_input("approve", {"question": "ok?"})
        return {"answer": answer, "deliveries": ctx.deliveries}

    async with app:
        t = await app.submit(ask, None, ALICE, watchers=[BOB])
        async with fast_worker(app, input_park=TIMEOUT):
            waiting = await until(app, t.id, ALICE,
                                  lambda s: s.status == TaskStatus.WAITING_INPUT)
            assert {"approve": {"question": "ok?"}} == waiting.input_requests
            assert waiting.claim is not None
            assert not waiting.claim.ended
            result = await app.respond(t.id, {"approve": True}, BOB)
            assert "applied" == result.outcome
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert ({"answer": True, "deliveries": 1}, 1) == (done.result, done.deliveries)


async def test_two_questions_asked_at_once_are_answered_in_the_same_run() -> None:
    """A handler MAY ask two keys at once (``asyncio.gather``); answered one after the
    other while the run waits, both answers MUST reach it in the same delivery — the
    second wait ending after the first must not break the run's account of time spent
    waiting."""
    app = make_app()

    @app.task
    async def ask_both(ctx: TaskContext) -> Any:
        first, second = await asyncio.gather(ctx.request_input("x", {}),
                                             ctx.request_input("y", {}))
        return {"answers": [first, second], "deliveries": ctx.deliveries}

    async with app:
        t = await app.submit(ask_both, None, ALICE)
        async with fast_worker(app, input_park=TIMEOUT):
            await until(app, t.id, ALICE, lambda s: set(s.input_requests) == {"x", "y"})
            assert "applied" == (await app.respond(t.id, {"x": 1}, ALICE)).outcome
            assert "applied" == (await app.respond(t.id, {"y": 2}, ALICE)).outcome
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert (TaskStatus.COMPLETED, {"answers": [1, 2], "deliveries": 1}) == (done.status,
                                                                          done.result)


async def test_the_same_answers_sent_again_answer_a_question_asked_since() -> None:
    """A form answering every question, sent again after a new one was asked, MUST answer
    that one (``applied``); sent again before any new question, it is a safe retry
    (``duplicate``)."""
    app = make_app()

    @app.task
    async def ask_in_turn(ctx: TaskContext) -> Any:
        return [await ctx.request_input("a", {}), await ctx.request_input("b", {})]

    form = {"a": 1, "b": 2}
    async with app:
        t = await app.submit(ask_in_turn, None, ALICE)
        async with fast_worker(app, input_park=TIMEOUT):
            await until(app, t.id, ALICE, lambda s: "a" in s.input_requests)
            assert "applied" == (await app.respond(t.id, form, ALICE)).outcome
            await until(app, t.id, ALICE, lambda s: "b" in s.input_requests)
            assert "applied" == (await app.respond(t.id, form, ALICE)).outcome
            assert "duplicate" == (await app.respond(t.id, form, ALICE)).outcome
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert (TaskStatus.COMPLETED, [1, 2]) == (done.status, done.result)


async def test_a_parked_run_frees_its_slot_and_reruns_with_the_stored_answer() -> None:
    """After the park time the run MUST release its lease without writing (the task
    waits in ``waiting_input``, holding no worker); the answer MUST make it claimable; the
    re-run MUST get the stored answer without asking again."""
    app = make_app()
    calls: list[int] = []
    other_ran = asyncio.Event()

    @app.task
    async def ask(ctx: TaskContext) -> Any:
        calls.append(ctx.deliveries)
        first = await ctx.request_input("first", None)
        return {"first": first, "deliveries": ctx.deliveries}

    @app.task
    async def other(ctx: TaskContext) -> None:
        other_ran.set()

    async with app:
        t = await app.submit(ask, None, ALICE)
        async with fast_worker(app, concurrency=1, input_park=0.05):
            parked = await until(app, t.id, ALICE,
                                 lambda s: s.claim is not None and s.claim.ended)
            assert (TaskStatus.WAITING_INPUT, 1) == (parked.status, parked.revision)
            await app.submit(other, None, ALICE)
            await asyncio.wait_for(other_ran.wait(), TIMEOUT)  # the one slot is free
            await app.respond(t.id, {"first": "yes"}, ALICE)
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
        history = [r.kind for r in await app.history(t.id, ALICE)]
    assert ({"first": "yes", "deliveries": 2}, [1, 2]) == (done.result, calls)
    assert ["input_requested", "input_responses_accepted", "completed"] == history


async def test_a_sync_handler_asks_with_request_input_sync() -> None:
    """A sync handler MUST be able to ask and wait with ``request_input_sync``."""
    app = make_app()

    @app.task
    def ask(ctx: TaskContext) -> Any:
        return ctx.request_input_sync("name", {"q": "who?"})

    async with app:
        t = await app.submit(ask, None, ALICE)
        async with fast_worker(app, input_park=TIMEOUT):
            await until(app, t.id, ALICE, lambda s: s.status == TaskStatus.WAITING_INPUT)
            await app.respond(t.id, {"name": "ada"}, ALICE)
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert "ada" == done.result


async def test_an_input_request_or_sleep_that_is_not_awaited_fails_loudly() -> None:
    """``ctx.request_input`` and ``ctx.sleep`` MUST NOT pass for done when not awaited: a
    sync handler calling them is refused (``RuntimeError`` naming the sync way), and an
    async handler testing the un-awaited call (``if ctx.request_input(...)``: a coroutine
    is true) gets a ``TypeError`` — the run fails, nothing asked, instead of "approved".
    Awaited through ``asyncio.create_task`` they still work."""
    app = make_app()

    @app.task
    def sync_asks(ctx: TaskContext) -> str:
        return "paid" if ctx.request_input("approve", {}) else "refused"

    @app.task
    def sync_sleeps(ctx: TaskContext) -> str:
        ctx.sleep(60)
        return "slept"

    @app.task
    async def forgets_await(ctx: TaskContext) -> str:
        return "paid" if ctx.request_input("approve", {}) else "refused"

    @app.task
    async def in_a_task(ctx: TaskContext) -> Any:
        await asyncio.create_task(ctx.sleep(0))
        return await asyncio.create_task(ctx.request_input("approve", {}))

    async with app:
        ids = {name: (await app.submit(name, None, ALICE)).id
               for name in ("sync_asks", "sync_sleeps", "forgets_await", "in_a_task")}
        async with fast_worker(app, input_park=TIMEOUT):
            failed = {name: await app.wait(ids[name], ALICE, timeout=TIMEOUT)
                      for name in ("sync_asks", "sync_sleeps", "forgets_await")}
            await until(app, ids["in_a_task"], ALICE,
                        lambda s: s.status == TaskStatus.WAITING_INPUT)
            await app.respond(ids["in_a_task"], {"approve": "yes"}, ALICE)
            answered = await app.wait(ids["in_a_task"], ALICE, timeout=TIMEOUT)
    assert {name: (TaskStatus.FAILED, kind) for name, kind in (
        ("sync_asks", "RuntimeError"), ("sync_sleeps", "RuntimeError"),
        ("forgets_await", "TypeError"))} == {
        name: (done.status, done.error and done.error.type) for name, done in failed.items()}
    assert "request_input_sync" in (failed["sync_asks"].error.message
                                    if failed["sync_asks"].error else "")
    assert "await" in (failed["forgets_await"].error.message
                       if failed["forgets_await"].error else "")
    assert all(done.input_requests == {} and not done.accepted_input_responses
               for done in failed.values())
    assert (TaskStatus.COMPLETED, "yes") == (answered.status, answered.result)


async def test_cancel_while_waiting_for_input_stops_the_run() -> None:
    """A cancel while the run waits MUST end the wait with the ``user`` cause and leave
    the task ``cancelled``."""
    app = make_app()
    stopped = threading.Event()
    seen: list[Any] = []

    @app.task
    def ask(ctx: TaskContext) -> Any:
        try:
            return ctx.request_input_sync("go", None)
        except RunCancelled as exc:
            seen.append(exc.reason)
            raise
        finally:
            stopped.set()

    async with app:
        t = await app.submit(ask, None, ALICE)
        async with fast_worker(app, input_park=TIMEOUT):
            await until(app, t.id, ALICE, lambda s: s.status == TaskStatus.WAITING_INPUT)
            await app.cancel(t.id, ALICE)
            assert await asyncio.to_thread(stopped.wait, TIMEOUT)
        snapshot = await app.get(t.id, ALICE)
    assert [CancelReason.USER] == seen
    assert TaskStatus.CANCELLED == snapshot.status


async def test_request_input_validates_keys_and_size() -> None:
    """A bad key or an oversized request MUST raise InvalidInput in the handler."""
    from tasks_core import Limits

    app = make_app(limits=Limits(max_input_bytes=50))

    @app.task
    async def ask(ctx: TaskContext) -> list[str]:
        refused = []
        for key, request in (("a::b", None), ("big", "x" * 100)):
            try:
                await ctx.request_input(key, request)
            except InvalidInput:
                refused.append(key)
        return refused

    async with app:
        t = await app.submit(ask, None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert ["a::b", "big"] == done.result


@pytest.mark.parametrize("request_", [{1, 2}, b"x", "\ud800", {"a": float("nan")}, (1, 2),
                                      {1: "a"}], ids=["set", "bytes", "surrogate", "nan",
                                                      "tuple", "int-key"])
async def test_a_request_that_is_not_json_is_refused_with_invalid_input(request_: Any) -> None:
    """A request that is not plain JSON MUST raise ``InvalidInput`` naming ``request`` in
    the handler — as ``submit`` and ``respond`` refuse such input — before anything is
    written (it raised ``TypeError`` or ``UnicodeEncodeError`` from the size count)."""
    app = make_app()

    @app.task
    async def ask(ctx: TaskContext) -> str:
        try:
            await ctx.request_input("k", request_)
        except InvalidInput as exc:
            return str(exc)
        return "asked"

    async with app:
        t = await app.submit(ask, None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
        history = await app.history(t.id, ALICE)
    assert str(done.result).startswith("request")
    assert not done.input_requests
    assert "input_requested" not in [record.event.kind for record in history]


async def test_one_key_asked_twice_at_once_shares_one_question_or_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two asks of one key at once (``asyncio.gather``, two threads) MUST share the
    question when they ask the same request — both get its answer — and the second MUST be
    refused with ``InvalidInput`` in the handler when it asks another (it wrote a
    conflicting event: an ERROR with a traceback and an unplanned park, after which a sync
    handler's other thread ran its code past the answer in both deliveries)."""
    import logging

    caplog.set_level(logging.ERROR, logger="tasks_core")
    app = make_app()

    @app.task
    async def same(ctx: TaskContext) -> Any:
        return list(await asyncio.gather(ctx.request_input("q", {"k": 1}),
                                         ctx.request_input("q", {"k": 1})))

    @app.task
    async def other(ctx: TaskContext) -> Any:
        first, second = await asyncio.gather(ctx.request_input("q", {"k": 1}),
                                             ctx.request_input("q", {"k": 2}),
                                             return_exceptions=True)
        return {"refused": repr(second), "first": first, "deliveries": ctx.deliveries}

    async with app:
        shared = await app.submit(same, None, ALICE)
        refused = await app.submit(other, None, ALICE)
        async with fast_worker(app, input_park=TIMEOUT):
            for task in (shared, refused):
                await until(app, task.id, ALICE, lambda s: "q" in s.input_requests)
                await app.respond(task.id, {"q": 3}, ALICE)
            both = await app.wait(shared.id, ALICE, timeout=TIMEOUT)
            one = await app.wait(refused.id, ALICE, timeout=TIMEOUT)
    assert [3, 3] == both.result
    assert {"refused": "InvalidInput(\"input key 'q' is asked already in this run, with "
                       "another request\")", "first": 3, "deliveries": 1} == one.result
    assert [] == [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
