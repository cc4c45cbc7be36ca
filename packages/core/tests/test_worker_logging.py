"""What a worker logs: nothing per task at INFO on the normal path (each line costs CPU
per task, and more with every process), one summary line per interval instead."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from typing import Any

import pytest
from _runtime_kit import ALICE, LEASED, TIMEOUT, DelegatingStore, fast_worker, make_app, until
from tasks_contract_tests._kit import submitted_in_order
from tasks_core import App, ManualClock, RetryPolicy, TaskContext, TaskStatus
from tasks_core.runtime._tally import Tally
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


async def test_a_worker_logs_no_line_per_task_at_info_and_sums_them_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Twenty completed tasks MUST leave no per-task line at INFO (they are DEBUG), and
    the worker's summary line at its stop MUST count them."""
    caplog.set_level(logging.DEBUG, logger="tasks_core")
    app = make_app()

    @app.task
    async def job(ctx: TaskContext) -> None:
        return None

    async with app:
        ids = [(await app.submit(job, None, ALICE)).id for _ in range(20)]
        worker = fast_worker(app, concurrency=4)
        async with worker:
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert not [line for line in info if any(task_id in line for task_id in ids)]
    assert all(any(task_id in line for line in debug) for task_id in ids)
    summaries = [_no_seconds(line) for line in info if "in the last" in line]
    assert [f"worker {worker.worker_id}: 20 completed in the last Ns; 0 running, 0 held"] \
        == summaries


async def test_a_summary_counts_each_run_by_what_it_made_of_its_task(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The summary MUST count a run by the task's state it left: a handler that raised
    with an attempt left as ``retried``, one that raised with none left as ``failed`` (its
    event was a retry request), one that returned as ``completed``."""
    caplog.set_level(logging.INFO, logger="tasks_core.worker")
    app = make_app()

    async def boom(ctx: TaskContext) -> None:
        raise RuntimeError("boom")

    last = app.task(name="last_try")(boom)
    again = app.task(name="tries_again", retry=RetryPolicy.fixed(60.0, attempts=2))(boom)

    @app.task
    async def fine(ctx: TaskContext) -> None:
        return None

    async with app:
        ids = [(await app.submit(task, None, ALICE)).id for task in (last, fine, again)]
        worker = fast_worker(app)
        async with worker:
            ended = [await app.wait(task_id, ALICE, timeout=TIMEOUT) for task_id in ids[:2]]
            async for snapshot in app.watch(ids[2], ALICE):
                if snapshot.retry_count == 1:
                    break
    assert ["failed", "completed"] == [snapshot.status for snapshot in ended]
    summaries = [_no_seconds(r.getMessage()) for r in caplog.records
                 if "in the last" in r.getMessage()]
    assert [f"worker {worker.worker_id}: 1 completed, 1 failed, 1 retried in the last Ns; "
            "0 running, 0 held"] == summaries


async def test_a_summary_counts_a_cancelled_run_and_a_parked_one_as_such(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run stopped by a user's cancel MUST count as ``cancelled`` and a run parked for
    input as ``parked`` — not as ``released`` (what a drain gives back), and the question
    itself not as a run's end."""
    caplog.set_level(logging.INFO, logger="tasks_core.worker")
    app = make_app()
    started = asyncio.Event()

    @app.task
    async def slow(ctx: TaskContext) -> None:
        started.set()
        await ctx.sleep(TIMEOUT)

    @app.task
    async def asks(ctx: TaskContext) -> Any:
        return await ctx.request_input("ok", {})

    async with app:
        doomed = await app.submit(slow, None, ALICE)
        question = await app.submit(asks, None, ALICE)
        worker = fast_worker(app, input_park=0.01)
        async with worker:
            await asyncio.wait_for(started.wait(), TIMEOUT)
            await app.cancel(doomed.id, ALICE)
            await until(app, question.id, ALICE,
                        lambda s: s.claim is not None and s.claim.ended)
            await until(app, doomed.id, ALICE, lambda s: s.claim is not None and s.claim.ended)
    summaries = [_no_seconds(r.getMessage()) for r in caplog.records
                 if "in the last" in r.getMessage()]
    assert [f"worker {worker.worker_id}: 1 cancelled, 1 parked in the last Ns; "
            "0 running, 0 held"] == summaries


def test_a_summary_counts_since_the_last_line_and_says_nothing_when_idle(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each summary MUST count only what ended since the previous one, by kind, and an
    interval in which nothing ended MUST log nothing."""
    caplog.set_level(logging.INFO, logger="tasks_core.worker")
    tally = Tally("w1", lambda: (3, 5))
    for kind in ("completed", "completed", "failed", "released"):
        tally.count(kind)
    tally.flush()
    tally.flush()
    tally.count("retried")
    tally.flush()
    assert ["worker w1: 2 completed, 1 failed, 1 released in the last Ns; 3 running, 5 held",
            "worker w1: 1 retried in the last Ns; 3 running, 5 held"] \
        == [_no_seconds(r.getMessage()) for r in caplog.records]


def _no_seconds(line: str) -> str:
    return re.sub(r"in the last [0-9.]+s", "in the last Ns", line)


def test_a_summary_spans_the_time_since_the_last_line_quiet_intervals_included(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A summary MUST say how long since the previous line: an interval that logged
    nothing (nothing ended) does not restart that span."""
    caplog.set_level(logging.INFO, logger="tasks_core.worker")
    now = [100.0]
    tally = Tally("w1", lambda: (1, 0), clock=lambda: now[0])
    now[0] = 130.0
    tally.flush()  # quiet: nothing ended
    now[0] = 160.0
    tally.count("released")
    tally.flush()
    now[0] = 175.0
    tally.count("completed")
    tally.flush()
    assert ["worker w1: 1 released in the last 60.0s; 1 running, 0 held",
            "worker w1: 1 completed in the last 15.0s; 1 running, 0 held"] \
        == [r.getMessage() for r in caplog.records]


class HeldCommits(DelegatingStore):
    """Holds every group commit (``transition_many``) until ``release`` is set."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def transition_many(self, items: Sequence[Any]) -> list[Any]:
        self.entered.set()
        await self.release.wait()
        return list(await self.inner.transition_many(items))


async def test_the_summary_counts_handlers_running_not_runs_awaiting_their_commit() -> None:
    """A run whose handler ended and whose outcome waits for the group commit holds no
    slot: the summary's "running" MUST NOT count it."""
    store = HeldCommits(MemoryStore())
    app = App(store=store)

    @app.task
    async def job(ctx: TaskContext) -> None:
        return None

    async with app:
        ids = [(await app.submit(job, None, ALICE)).id for _ in range(3)]
        worker = fast_worker(app, concurrency=4)
        async with worker:
            await asyncio.wait_for(store.entered.wait(), TIMEOUT)
            assert worker.tally is not None
            assert 0 == worker.tally.busy()[0]
            store.release.set()
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)


async def test_a_drain_logs_no_line_per_task_at_info_and_counts_its_releases(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A drain MUST say nothing per task at INFO — a run asked to stop for the shutdown
    and a claim held ahead given back unstarted are DEBUG lines (a worker drained with a
    backlog held would log a line for each) — and the summary line at its stop MUST
    count every task it gave back as ``released``."""
    caplog.set_level(logging.DEBUG, logger="tasks_core")
    clock = ManualClock()
    app = make_app(store=MemoryStore(clock=clock))

    @app.task
    async def endless(ctx: TaskContext) -> None:
        await ctx.sleep(3600)

    async with app:
        ids = await submitted_in_order(app, endless, clock, 3)
        worker = fast_worker(app, concurrency=1, prefetch=2)
        async with worker:
            await until(app, ids[2], ALICE, lambda s: s.status in LEASED)
            assert await worker.shutdown(drain_timeout=TIMEOUT)
        assert [TaskStatus.PENDING] * 3 == [(await app.get(i, ALICE)).status for i in ids]
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert not [line for line in info if any(task_id in line for task_id in ids)]
    assert all(any(task_id in line and "released" in line for line in debug)
               for task_id in ids)
    summaries = [_no_seconds(line) for line in info if "in the last" in line]
    assert [f"worker {worker.worker_id}: 3 released in the last Ns; 0 running, 0 held"] \
        == summaries


async def test_a_result_that_cannot_be_stored_fails_with_a_warning_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A task failed ``InvalidResult`` (a result that is not JSON, or over
    ``max_result_bytes``) MUST get a WARNING line naming it, as every other failure does
    — not only a count in the summary."""
    caplog.set_level(logging.INFO, logger="tasks_core.worker")
    app = make_app(store=MemoryStore())

    @app.task
    async def nan(ctx: TaskContext) -> dict[str, float]:
        return {"x": float("nan")}

    @app.task
    async def big(ctx: TaskContext) -> str:
        return "x" * (2 << 20)

    async with app:
        ids = [(await app.submit(task, None, ALICE)).id for task in (nan, big)]
        async with fast_worker(app):
            ended = [await app.wait(task_id, ALICE, timeout=TIMEOUT) for task_id in ids]
    assert ["InvalidResult"] * 2 == [s.error.type for s in ended if s.error is not None]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for task_id in ids:
        [line] = [line for line in warned if task_id in line]
        assert "InvalidResult" in line


async def test_an_exception_class_name_that_is_no_type_name_is_stored_as_its_bases(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An exception class whose name is no error type name (``Retry(error=…)``'s rule: a
    Python identifier, dotted parts allowed, at most 128 characters) MUST be stored, logged
    and counted under its nearest base class whose name is one: a name with a newline
    cannot forge a log line nor a metric label."""
    caplog.set_level(logging.INFO, logger="tasks_core.worker")
    app = make_app(store=MemoryStore())
    weird = type("Weird\n2099-01-01 CRITICAL forged", (KeyError,), {})
    long = type("L" * 129, (ValueError,), {})

    @app.task
    async def job(ctx: TaskContext, which: str) -> None:
        raise (weird if which == "weird" else long)("x")

    async with app:
        ids = [(await app.submit(job, {"which": which}, ALICE)).id for which in ("weird", "long")]
        async with fast_worker(app):
            ended = [await app.wait(task_id, ALICE, timeout=TIMEOUT) for task_id in ids]
    assert ["KeyError", "ValueError"] == [s.error.type for s in ended if s.error is not None]
    assert not [r for r in caplog.records if "forged" in r.getMessage()]
