"""Stored error text is bounded and redacted on every path: a failure, a retry's
``last_failure``, a ``Retry`` message, the history — and a redactor that fails withholds
the text everywhere, logs included."""

from __future__ import annotations

import logging

import pytest
from _runtime_kit import ALICE, TIMEOUT, fast_worker, make_app, until
from tasks_core import (
    App,
    ManualClock,
    Policy,
    Retry,
    RetryPolicy,
    Snapshot,
    TaskContext,
    TaskStatus,
)
from tasks_core.policy import Redactor

pytestmark = pytest.mark.anyio

SECRET = "sk-live-4f9a0c"
HUGE = 10 * 1024 * 1024


def _redact(exc: BaseException, text: str) -> str:
    return text.replace(SECRET, "[redacted]")


def _app(clock: ManualClock, redactor: Redactor | None) -> App:
    app = make_app(clock, policy=Policy(error_redactor=redactor))

    @app.task(retry=RetryPolicy.fixed(5.0, attempts=2))
    async def leaky(ctx: TaskContext) -> None:
        raise ValueError(f"token {SECRET} rejected " + "x" * HUGE)

    @app.task(retry=RetryPolicy.fixed(5.0, attempts=2))
    async def asks_again(ctx: TaskContext) -> Retry:
        return Retry(f"rate limited for {SECRET} " + "y" * HUGE, error="RateLimited")

    @app.task
    async def undecodable(ctx: TaskContext) -> None:
        raise OSError("cannot open " + b"report-\xff.txt".decode("utf-8", "surrogateescape"))

    return app


async def _stored_text(app: App, task_id: str) -> list[str]:
    snapshot = await app.get(task_id, ALICE)
    texts = [info.message for info in (snapshot.error, snapshot.last_failure) if info]
    for record in await app.history(task_id, ALICE):
        texts.append(record.model_dump_json())
    return texts


async def _two_attempts(app: App, clock: ManualClock, task: str) -> tuple[Snapshot, Snapshot]:
    t = await app.submit(task, None, ALICE)
    async with fast_worker(app):
        retrying = await until(app, t.id, ALICE, lambda s: s.retry_at is not None)
        clock.advance(6)
        done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    return retrying, done


@pytest.mark.parametrize("task", ["leaky", "asks_again"])
async def test_a_ten_megabyte_error_is_stored_redacted_and_cut_to_2048(task: str) -> None:
    """A handler failing (or asking for a retry) with a 10 MB message holding a secret
    MUST have the redactor's text stored, at most 2048 characters, secret-free — in the
    retry's ``last_failure``, in the final ``error`` and in every history record."""
    clock = ManualClock()
    app = _app(clock, _redact)
    async with app:
        retrying, done = await _two_attempts(app, clock, task)
        texts = await _stored_text(app, done.id)
    assert retrying.last_failure is not None
    assert done.error is not None
    assert TaskStatus.FAILED == done.status
    for info in (retrying.last_failure, done.error):
        assert 2048 == len(info.message)
        assert "[redacted]" in info.message
    for text in texts:
        assert SECRET not in text
        assert len(text) < 8 * 2048


class _Oops(Exception):
    pass


def _raising(exc: BaseException, text: str) -> str:
    raise _Oops(f"cannot redact {text[:100]}")


def _not_text(exc: BaseException, text: str) -> str:
    return None  # type: ignore[return-value]


@pytest.mark.parametrize("redactor", [_raising, _not_text], ids=["raises", "returns None"])
async def test_a_failing_redactor_stores_a_fixed_message_and_logs_no_text(
    redactor: Redactor, caplog: pytest.LogCaptureFixture
) -> None:
    """A redactor that raises (quoting the text in its own error) or returns something
    else than text MUST make the runtime store ``"<ErrorType> (message withheld: the
    error redactor failed)"`` — and the original text MUST NOT reach the log either."""
    caplog.set_level(logging.DEBUG, logger="tasks_core")
    clock = ManualClock()
    app = _app(clock, redactor)
    async with app:
        retrying, done = await _two_attempts(app, clock, "leaky")
        texts = await _stored_text(app, done.id)
    withheld = "ValueError (message withheld: the error redactor failed)"
    assert retrying.last_failure is not None
    assert done.error is not None
    assert (withheld, withheld) == (retrying.last_failure.message, done.error.message)
    for text in texts:
        assert SECRET not in text
    assert caplog.records, "the failing redactor must be logged"
    for record in caplog.records:
        assert SECRET not in record.getMessage()
        assert record.exc_info is None or SECRET not in str(record.exc_info[1])


async def test_an_error_text_with_lone_surrogates_is_stored_escaped() -> None:
    """An error message holding lone surrogates (``surrogateescape``-decoded bytes, which
    no store can encode) MUST be stored with each one escaped, and the task MUST fail
    normally — never stay leased by a run that could not write its outcome."""
    clock = ManualClock()
    app = _app(clock, None)
    async with app:
        t = await app.submit("undecodable", None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert done.error is not None
    assert ("OSError", "cannot open report-\\udcff.txt") == (done.error.type,
                                                            done.error.message)
