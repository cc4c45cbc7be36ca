"""Retries through the store's ``retry_at``, unrecoverable errors, timeouts and results."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from _runtime_kit import ALICE, TIMEOUT, RecordingStore, fast_worker, make_app, until
from tasks_core import (
    CancelReason,
    InvalidInput,
    LeaseLost,
    ManualClock,
    Retry,
    RetryPolicy,
    TaskContext,
    TaskStatus,
)
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


async def test_a_raising_handler_is_retried_after_the_store_deadline() -> None:
    """A handler exception with attempts left MUST become ``retry_requested`` with
    ``retry_at = committed_at + delay`` by the store clock; no claim MUST run it before
    then; afterwards it runs again as attempt 2."""
    clock = ManualClock()
    app = make_app(clock)
    attempts: list[int] = []

    @app.task(retry=RetryPolicy.fixed(30, attempts=3))
    async def flaky(ctx: TaskContext) -> int:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("upstream down")
        return ctx.attempt

    async with app:
        t = await app.submit(flaky, None, ALICE)
        async with fast_worker(app):
            waiting = await until(app, t.id, ALICE, lambda s: s.retry_at is not None)
            history = await app.history(t.id, ALICE)
            assert ["retry_requested"] == [r.kind for r in history]
            assert history[0].committed_at + timedelta(seconds=30) == waiting.retry_at
            assert waiting.last_failure is not None
            assert ("ConnectionError", "upstream down") == (waiting.last_failure.type,
                                                            waiting.last_failure.message)
            assert [1] == attempts, "no run before retry_at"
            assert waiting.retry_at is not None
            clock.advance((waiting.retry_at - clock.now()).total_seconds())
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert (TaskStatus.COMPLETED, 2, [1, 2]) == (done.status, done.result, attempts)


async def test_exhausted_retries_fail_the_task() -> None:
    """Without attempts left the store MUST fail the task with the handler's error."""
    app = make_app(store=MemoryStore())  # the system clock: retry_at comes due by itself

    @app.task(retry=RetryPolicy.fixed(0, attempts=2))
    async def always(ctx: TaskContext) -> None:
        raise ValueError(f"bad {ctx.attempt}")

    async with app:
        t = await app.submit(always, None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert done.error is not None
    assert (TaskStatus.FAILED, "ValueError", "bad 2", 1) == (
        done.status, done.error.type, done.error.message, done.retry_count)


@pytest.mark.parametrize("how", ["returned", "raised"])
async def test_retry_returned_or_raised_asks_for_a_retry(how: str) -> None:
    """Returning or raising ``Retry(...)`` MUST request a retry under the policy, storing
    its message."""
    app = make_app(store=MemoryStore())  # the system clock: retry_at comes due by itself

    @app.task(retry=RetryPolicy.fixed(0, attempts=2))
    async def job(ctx: TaskContext) -> Any:
        if ctx.attempt == 1:
            if how == "raised":
                raise Retry("not ready yet")
            return Retry("not ready yet")
        return "ready"

    async with app:
        t = await app.submit(job, None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert done.last_failure is not None
    assert ("ready", 1, "Retry", "not ready yet") == (
        done.result, done.retry_count, done.last_failure.type, done.last_failure.message)


@pytest.mark.parametrize("error", [RecursionError, MemoryError, SystemExit, KeyboardInterrupt])
@pytest.mark.parametrize("kind", ["async", "sync"])
@pytest.mark.parametrize("grouped", [False, True], ids=["alone", "in-a-group"])
async def test_unrecoverable_errors_fail_at_once(
    error: type[BaseException], kind: str, grouped: bool
) -> None:
    """MemoryError, RecursionError, KeyboardInterrupt and SystemExit MUST fail the task at
    once even with attempts left — alone, or among the errors of an exception group (as
    ``asyncio.TaskGroup`` raises them) — and MUST NOT stop the worker."""
    app = make_app()
    raised = BaseExceptionGroup("tasks", [ValueError("other"), error("deep trouble")])

    def boom() -> None:
        if grouped:
            raise raised
        raise error("deep trouble")

    if kind == "async":

        @app.task(name="job", retry=RetryPolicy.fixed(0, attempts=5))
        async def job_async(ctx: TaskContext) -> None:
            boom()
    else:

        @app.task(name="job", retry=RetryPolicy.fixed(0, attempts=5))
        def job_sync(ctx: TaskContext) -> None:
            boom()

    @app.task
    async def after(ctx: TaskContext) -> str:
        return "still serving"

    async with app:
        t = await app.submit("job", None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
            later = await app.submit(after, None, ALICE)
            assert "still serving" == (await app.wait(later.id, ALICE, timeout=TIMEOUT)).result
    assert done.error is not None
    name = type(raised).__name__ if grouped else error.__name__
    assert (TaskStatus.FAILED, name, 0) == (done.status, done.error.type, done.retry_count)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_timeout_fails_with_task_timeout_and_is_never_retried(kind: str) -> None:
    """A run past its timeout MUST be recorded ``failed`` with ``TaskTimeout`` and the
    message "Timeout of Ns exceeded", cancel reason ``timeout``, even with attempts left;
    the handler's token MUST get ``timeout``."""
    app = make_app()
    reasons: list[Any] = []
    noted = threading.Event()

    if kind == "async":

        @app.task(name="slow", timeout=0.05, retry=RetryPolicy.fixed(0, attempts=5))
        async def slow_async(ctx: TaskContext) -> None:
            try:
                await asyncio.Event().wait()
            finally:
                reasons.append(ctx.cancel_reason)
                noted.set()
    else:

        @app.task(name="slow", timeout=0.05, retry=RetryPolicy.fixed(0, attempts=5))
        def slow_sync(ctx: TaskContext) -> None:
            ctx.token.wait_sync(TIMEOUT)
            reasons.append(ctx.cancel_reason)
            noted.set()

    async with app:
        t = await app.submit("slow", None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
            assert await asyncio.to_thread(noted.wait, TIMEOUT)
    assert done.error is not None
    assert (TaskStatus.FAILED, "TaskTimeout", "Timeout of 0.05s exceeded", CancelReason.TIMEOUT,
            0, 1) == (done.status, done.error.type, done.error.message, done.cancel_reason,
                      done.retry_count, done.deliveries)
    assert [CancelReason.TIMEOUT] == reasons


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_late_result_of_a_timed_out_run_is_fenced_off(kind: str) -> None:
    """The result a handler produces after its run timed out MUST be refused by the store
    (the Failed event ended the lease: LeaseLost) and never replace ``failed``."""
    store = RecordingStore(MemoryStore(clock=ManualClock()))
    app = make_app(store=store)
    release = threading.Event()

    if kind == "async":

        @app.task(name="slow", timeout=0.05)
        async def slow_async(ctx: TaskContext) -> str:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                return "late"  # ignores the stop and returns anyway
            return "never"
    else:

        @app.task(name="slow", timeout=0.05)
        def slow_sync(ctx: TaskContext) -> str:
            release.wait(TIMEOUT)
            return "late"

    async with app:
        t = await app.submit("slow", None, ALICE)
        async with fast_worker(app):
            await app.wait(t.id, ALICE, timeout=TIMEOUT)
            release.set()
            fenced = await store.wait_for(lambda r: r.event.kind == "completed")
        assert isinstance(fenced.error, LeaseLost)
        snapshot = await app.get(t.id, ALICE)
        assert (TaskStatus.FAILED, None) == (snapshot.status, snapshot.result)
        assert ["failed"] == [r.kind for r in await app.history(t.id, ALICE)]


async def test_time_waiting_for_input_does_not_count_against_the_timeout() -> None:
    """The timeout MUST bound the handler's own time, not a wait for a person."""
    app = make_app()

    @app.task(timeout=0.2)
    async def ask(ctx: TaskContext) -> Any:
        return await ctx.request_input("go", None)

    async with app:
        t = await app.submit(ask, None, ALICE)
        async with fast_worker(app, input_park=TIMEOUT):
            await until(app, t.id, ALICE, lambda s: s.status == TaskStatus.WAITING_INPUT)
            await asyncio.sleep(0.4)  # time passes: twice the timeout, waiting for a person
            await app.respond(t.id, {"go": "now"}, ALICE)
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert (TaskStatus.COMPLETED, "now", 1) == (done.status, done.result, done.deliveries)


async def test_a_result_that_is_not_json_fails_without_retry() -> None:
    """A non-JSON result MUST fail the task (``InvalidResult``), never retried."""
    app = make_app()

    @app.task(retry=RetryPolicy.fixed(0, attempts=3))
    async def job(ctx: TaskContext) -> Any:
        return {1, 2}

    async with app:
        t = await app.submit(job, None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert done.error is not None
    assert (TaskStatus.FAILED, "InvalidResult", 0) == (done.status, done.error.type,
                                                       done.retry_count)


async def test_an_async_handler_that_never_awaits_still_times_out() -> None:
    """An async handler that runs past its timeout without ever awaiting (the event loop
    cannot stop it) MUST still be recorded ``failed`` (``TaskTimeout``) when it returns,
    and its late result fenced off — never ``completed``."""
    store = RecordingStore(MemoryStore(clock=ManualClock()))
    app = make_app(store=store)

    @app.task(timeout=0.05)
    async def spin(ctx: TaskContext) -> str:
        loop = asyncio.get_running_loop()
        until_ = loop.time() + 0.2
        while loop.time() < until_:  # CPU work: no await, the loop is blocked
            pass
        return "late"

    async with app:
        t = await app.submit(spin, None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
            fenced = await store.wait_for(lambda r: r.event.kind == "completed")
        assert isinstance(fenced.error, LeaseLost)
        assert done.error is not None
        assert (TaskStatus.FAILED, "TaskTimeout", None) == (done.status, done.error.type,
                                                            done.result)


async def test_a_result_above_the_limit_fails_without_retry() -> None:
    """A result whose compact JSON is above ``Limits.max_result_bytes`` MUST fail the task
    (``InvalidResult``, naming the limit), never retried nor stored; one at the limit
    MUST complete. The default MUST be 1 MiB."""
    from tasks_core import Limits

    assert 1024 * 1024 == Limits().max_result_bytes
    app = make_app(limits=Limits(max_result_bytes=12))

    @app.task(retry=RetryPolicy.fixed(0, attempts=3))
    async def job(ctx: TaskContext, text: str) -> str:
        return text

    async with app:
        big = await app.submit(job, {"text": "x" * 11}, ALICE)
        fits = await app.submit(job, {"text": "x" * 10}, ALICE)
        async with fast_worker(app):
            refused = await app.wait(big.id, ALICE, timeout=TIMEOUT)
            done = await app.wait(fits.id, ALICE, timeout=TIMEOUT)
    assert refused.error is not None
    assert (TaskStatus.FAILED, "InvalidResult", 0, None) == (
        refused.status, refused.error.type, refused.retry_count, refused.result)
    assert "max_result_bytes" in refused.error.message
    assert (TaskStatus.COMPLETED, "x" * 10) == (done.status, done.result)


async def test_the_log_says_when_a_failing_handler_has_no_retry_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler that raises MUST be logged with its (redacted) message and where it
    raised; a retry request the policy cannot grant MUST be logged as the task's failure
    (WARNING, with the redacted message: an operator logging at WARNING sees why), never as
    a retry; one it grants says when the retry is due."""
    clock = ManualClock()
    app = make_app(clock)

    @app.task
    async def once(ctx: TaskContext) -> None:
        raise ValueError("boom")

    @app.task(retry=RetryPolicy.fixed(5.0, attempts=2))
    async def twice(ctx: TaskContext) -> None:
        raise ValueError("again")

    async with app:
        failing = await app.submit(once, None, ALICE)
        retried = await app.submit(twice, None, ALICE)
        with caplog.at_level("INFO", logger="tasks_core.worker"):
            async with fast_worker(app):
                await until(app, failing.id, ALICE, lambda s: s.terminal)
                await until(app, retried.id, ALICE, lambda s: s.retry_at is not None)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert not [m for _, m in lines if "asking for a retry" in m]
    assert ("WARNING", f"task {failing.id!r}: failed: ValueError: boom (no retry left after "
            "1 attempt(s))") in lines
    raised = [m for _, m in lines if m.startswith(f"task {failing.id!r}: handler raised")]
    assert 1 == len(raised)
    assert "ValueError: boom\nTraceback (most recent call last):" in raised[0]
    assert 'raise ValueError("boom")' in raised[0]
    assert [m for _, m in lines if m.startswith(f"task {retried.id!r}: retry 1 scheduled at ")]


async def test_an_error_text_cannot_forge_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    """A handler's error message and a ``Retry`` message are stored text: the worker's log
    lines MUST show their line breaks and control characters escaped, so they can neither
    start a forged line nor drive the terminal that shows the log."""
    app = make_app(ManualClock())
    forged = "boom\n2099-01-01 WARNING tasks_core: forged\x1b[2J\r"

    @app.task
    async def raises(ctx: TaskContext) -> None:
        raise RuntimeError(forged)

    @app.task
    async def retries(ctx: TaskContext) -> None:
        raise Retry("E\x1b[31mRR\nforged", error="Forged")

    async with app:
        submitted = [await app.submit(raises, None, ALICE), await app.submit(retries, None, ALICE)]
        with caplog.at_level("INFO", logger="tasks_core.worker"):
            async with fast_worker(app):
                for one in submitted:
                    await until(app, one.id, ALICE, lambda s: s.terminal)
    messages = [r.getMessage() for r in caplog.records]
    about = [m.partition("\nTraceback")[0] for m in messages
             if any(repr(one.id) in m for one in submitted)]
    assert len(about) >= 3, messages
    for message in about:
        assert not {"\n", "\r", "\x1b"} & set(message), message
    assert any("boom\\n2099-01-01 WARNING tasks_core: forged\\x1b[2J\\r" in m for m in about)


async def test_a_traceback_cannot_forge_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    """The frames of a handler's traceback (file names, function names, source lines)
    MUST be logged with their control characters escaped, one frame's line each: a code
    object named with an escape sequence and a line break forges nothing."""
    app = make_app(ManualClock())

    async def handler(ctx: TaskContext) -> None:
        raise ValueError("plain")

    handler.__code__ = handler.__code__.replace(
        co_name="fn\x1b[31m\nFAKE", co_filename="/tmp/evil\x1b[2J\nfile.py")
    evil = app.task(name="evil_frames")(handler)
    async with app:
        submitted = await app.submit(evil, None, ALICE)
        with caplog.at_level("INFO", logger="tasks_core.worker"):
            async with fast_worker(app):
                await until(app, submitted.id, ALICE, lambda s: s.terminal)
    [logged] = [r.getMessage() for r in caplog.records if "handler raised" in r.getMessage()]
    trace = logged.partition("\nTraceback (most recent call last):\n")[2]
    assert "\x1b" not in logged
    assert 'File "/tmp/evil\\x1b[2J\\nfile.py", line ' in trace
    assert all(line.startswith(("  File ", "    ")) for line in trace.splitlines()), trace


@pytest.mark.parametrize("error", ["HTTP 503 for a@example.com", "", "1st", "E\x1b[31mRR",
                                   "x" * 129, 503, None])
def test_a_retry_error_is_a_type_name(error: Any) -> None:
    """``Retry(error=…)`` is stored as the error type and is a metric label: it MUST be a
    type name (a Python identifier, dotted parts allowed, at most 128 characters), else
    ``InvalidInput`` when the ``Retry`` is made — free text with ids in it would make a
    label of unbounded values and skip the message's redactor."""
    with pytest.raises(InvalidInput, match="error must be an error type name"):
        Retry("no", error=error)
    assert "RateLimited" == Retry("no", error="RateLimited").error
    assert "partner.HTTP503" == Retry("no", error="partner.HTTP503").error


async def test_a_lease_lapsed_while_the_loop_was_blocked_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An async handler blocking the event loop past the lease (``time.sleep`` in an
    ``async def``) has its outcome fenced off and its task run again; the warning MUST
    say the lease ran out before this worker renewed it and name the likely cause and the
    fix (a plain ``def`` handler), not only "fenced off"."""
    import logging
    import time

    caplog.set_level(logging.WARNING, logger="tasks_core.worker")
    app = make_app(store=MemoryStore())  # the system clock: the lease runs out meanwhile

    @app.task
    async def blocking(ctx: TaskContext) -> int:
        if ctx.deliveries == 1:
            time.sleep(0.6)  # noqa: ASYNC251 - the blocking call under test: no renew runs
        return ctx.deliveries

    async with app:
        t = await app.submit(blocking, None, ALICE)
        async with fast_worker(app, lease_for=0.3):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert (TaskStatus.COMPLETED, 2) == (done.status, done.result)
    fenced = [r.getMessage() for r in caplog.records if "fenced off" in r.getMessage()]
    assert fenced, [r.getMessage() for r in caplog.records]
    assert "ran out before this worker renewed it" in fenced[0]
    assert "event loop blocked" in fenced[0]
    assert "plain def" in fenced[0]
