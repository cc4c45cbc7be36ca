"""Every duration and interval of the public API, the worker and the CLI is checked once,
by ``tasks_core.durations.check_duration``, before anything starts or is written: a real
number (not a bool, not a string), finite, in its option's range; a refusal is
``InvalidInput`` naming the option (exit 2 on the CLI)."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from _runtime_kit import ALICE, TIMEOUT, DelegatingStore, fast_worker, make_app, until
from rich.console import Console
from tasks_core import (
    App,
    CancelReason,
    CancelToken,
    InvalidInput,
    NewTask,
    RetryPolicy,
    StoreError,
    StoreUnavailable,
    System,
    TaskContext,
    TaskStatus,
    TaskTimeout,
    Work,
    Worker,
)
from tasks_core.cli import run
from tasks_core.durations import (
    MAX_BATCH_WINDOW_S,
    MAX_KEEP_S,
    MAX_WAIT_S,
    MIN_INTERVAL_S,
    check_duration,
    parse_instant,
)
from tasks_core.periodic import MIN_EVERY_S
from tasks_core.rules import MAX_LEASE_S
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio

NAN, INF = float("nan"), float("inf")


@dataclass(frozen=True)
class Option:
    """One duration option: where it is given, and its range."""

    name: str
    what: str
    """How a refusal names it."""
    apply: Callable[[App, Any], Awaitable[object]]
    high: float
    low: float = 0.0
    zero: bool = False
    none: bool = False

    def bad(self) -> list[Any]:
        values: list[Any] = [NAN, INF, -INF, -1, True, "5", self.high * 2]
        values += [] if self.zero or self.low else [0]
        values += [] if self.none else [None]
        values += [self.low / 2] if self.low else []
        return values

    def good(self) -> list[Any]:
        return [self.high, self.low or (0 if self.zero else 1)]


async def _terminal(app: App) -> str:
    """A cancelled (finished) task of ``ALICE``: waits and watches on it end at once."""
    task = await app.submit("job", None, ALICE)
    await app.cancel(task.id, ALICE)
    return task.id


async def _wait(app: App, value: Any) -> object:
    return await app.wait(await _terminal(app), ALICE, timeout=value)


async def _watch(app: App, value: Any) -> object:
    task_id = await _terminal(app)
    return [s async for s in app.watch(task_id, ALICE, poll_interval=value)]


def _sync(make: Callable[[Any], object]) -> Callable[[App, Any], Awaitable[object]]:
    async def apply(app: App, value: Any) -> object:
        return make(value)

    return apply


def _registered(option: str) -> Callable[[App, Any], Awaitable[object]]:
    async def apply(app: App, value: Any) -> object:
        return app.task(name="handler", **{option: value})(lambda ctx: None)

    return apply


async def _periodic(app: App, value: Any) -> object:
    return app.periodic(every=value)(lambda ctx: None)


def _submitted(option: str) -> Callable[[App, Any], Awaitable[object]]:
    async def apply(app: App, value: Any) -> object:
        return await app.submit("job", None, ALICE, **{option: value})

    return apply


def _worker(option: str) -> Callable[[App, Any], Awaitable[object]]:
    async def apply(app: App, value: Any) -> object:
        return Worker(app, **{option: value})

    return apply


async def _wait_sync(app: App, value: Any) -> object:
    """``CancelToken.wait_sync`` of a token already cancelled, in a thread (as a sync
    handler calls it): it returns at once."""
    token = CancelToken()
    token.cancel(CancelReason.USER)
    return await asyncio.to_thread(token.wait_sync, value)


async def _shutdown(app: App, value: Any) -> object:
    return await Worker(app).shutdown(drain_timeout=value)


def _interval(name: str, what: str, apply: Callable[[App, Any], Awaitable[object]], *,
              none: bool = False) -> Option:
    """An interval the runtime repeats: at least ``MIN_INTERVAL_S``."""
    return Option(name, what, apply, MAX_WAIT_S, low=MIN_INTERVAL_S, none=none)


OPTIONS = [
    _interval("App(poll_interval)", "poll_interval",
              _sync(lambda v: App(store=MemoryStore(), poll_interval=v))),
    Option("App(retention)", "retention", _sync(lambda v: App(store=MemoryStore(), retention=v)),
           MAX_KEEP_S, zero=True, none=True),
    Option("app.task(timeout)", "timeout", _registered("timeout"), MAX_WAIT_S, none=True),
    Option("app.task(ttl)", "ttl", _registered("ttl"), MAX_KEEP_S, none=True),
    Option("app.task(retention)", "retention", _registered("retention"), MAX_KEEP_S,
           zero=True, none=True),
    Option("app.periodic(every)", "every", _periodic, MAX_WAIT_S, low=MIN_EVERY_S),
    Option("submit(timeout)", "timeout", _submitted("timeout"), MAX_WAIT_S, none=True),
    Option("submit(ttl)", "ttl", _submitted("ttl"), MAX_KEEP_S, none=True),
    Option("submit(retention)", "retention", _submitted("retention"), MAX_KEEP_S,
           zero=True, none=True),
    Option("RetryPolicy.fixed(delay)", "delay",
           _sync(lambda v: RetryPolicy.fixed(v, attempts=2)), MAX_WAIT_S, zero=True),
    Option("RetryPolicy.exponential(base)", "base",
           _sync(lambda v: RetryPolicy.exponential(v, attempts=2)), MAX_WAIT_S, zero=True),
    Option("RetryPolicy.exponential(cap)", "cap",
           _sync(lambda v: RetryPolicy.exponential(0, attempts=2, cap=v)), MAX_WAIT_S,
           zero=True, none=True),
    Option("RetryPolicy(delay_s)", "delay_s",
           _sync(lambda v: RetryPolicy(kind="fixed", attempts=2, delay_s=v)), MAX_WAIT_S,
           zero=True),
    Option("RetryPolicy(cap_s)", "cap_s",
           _sync(lambda v: RetryPolicy(kind="exponential", attempts=2, cap_s=v)), MAX_WAIT_S,
           zero=True, none=True),
    Option("Work(timeout_s)", "timeout_s", _sync(lambda v: Work(name="job", timeout_s=v)),
           MAX_WAIT_S, none=True),
    Option("NewTask(ttl_s)", "ttl_s", _sync(lambda v: NewTask(
        id="t", tenant="default", owner=ALICE, work=Work(name="job"), ttl_s=v)),
           MAX_KEEP_S, none=True),
    Option("NewTask(retention_s)", "retention_s", _sync(lambda v: NewTask(
        id="t", tenant="default", owner=ALICE, work=Work(name="job"), retention_s=v)),
           MAX_KEEP_S, zero=True, none=True),
    Option("app.wait(timeout)", "timeout", _wait, MAX_WAIT_S, zero=True, none=True),
    _interval("app.watch(poll_interval)", "poll_interval", _watch, none=True),
    Option("token.wait_sync(timeout)", "timeout", _wait_sync, MAX_WAIT_S, zero=True,
           none=True),
    Option("Worker(lease_for)", "lease_for", _worker("lease_for"), MAX_LEASE_S,
           low=MIN_INTERVAL_S),
    *(_interval(f"Worker({name})", name, _worker(name))
      for name in ("input_park", "poll_interval", "min_poll", "progress_interval")),
    _interval("Worker(reap_interval)", "reap_interval", _worker("reap_interval"), none=True),
    Option("Worker(batch_window)", "batch_window", _worker("batch_window"),
           MAX_BATCH_WINDOW_S, zero=True),
    Option("Worker(drain_timeout)", "drain_timeout", _worker("drain_timeout"), MAX_WAIT_S,
           zero=True),
    Option("worker.shutdown(drain_timeout)", "drain_timeout", _shutdown, MAX_WAIT_S,
           zero=True, none=True),
]
BAD = [pytest.param(o, v, id=f"{o.name}={v!r}") for o in OPTIONS for v in o.bad()]
GOOD = [pytest.param(o, v, id=f"{o.name}={v!r}") for o in OPTIONS for v in o.good()]


@pytest.mark.parametrize(("option", "value"), BAD)
async def test_every_duration_refuses_what_is_not_a_finite_number_in_range(
    option: Option, value: Any
) -> None:
    """NaN, ±infinity, a negative number, ``True``, ``"5"``, a value over the option's cap
    (and ``0``, ``None`` or below the floor where the option takes none of them) MUST be
    refused with ``InvalidInput`` naming the option — before anything is written."""
    app = make_app()
    async with app:
        with pytest.raises(InvalidInput, match=option.what):
            await option.apply(app, value)
        written = [s for s in await app.list(System()) if s.status != TaskStatus.CANCELLED]
        assert [] == written


@pytest.mark.parametrize(("option", "value"), GOOD)
async def test_every_duration_takes_its_bounds(option: Option, value: Any) -> None:
    """The option's cap itself and its smallest value (its floor, or ``0`` where zero is
    allowed) MUST be taken."""
    app = make_app()
    async with app:
        await option.apply(app, value)


@pytest.mark.parametrize("value", [3, 2.5, Fraction(1, 2)])
def test_a_duration_is_any_real_number_and_comes_back_a_float(value: Any) -> None:
    """Ints, floats and other real numbers MUST be taken, and come back as ``float``."""
    seconds = check_duration(value, "x", high=10)
    assert (float, float(value)) == (type(seconds), seconds)


def _in_a_loop_of_its_own(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``scenario`` on a fresh event loop in a thread, bounded by ``TIMEOUT`` from
    outside: a NaN timer in a loop keeps that loop's own timeouts from ever firing."""
    outcome: list[BaseException | None] = []

    def run_it() -> None:
        try:
            asyncio.run(scenario())
            outcome.append(None)
        except BaseException as exc:  # reported by the caller
            outcome.append(exc)

    thread = threading.Thread(target=run_it, daemon=True)
    thread.start()
    thread.join(TIMEOUT * 2)
    assert not thread.is_alive(), "a timeout never fired"
    if outcome[0] is not None:
        raise outcome[0]


def test_a_nan_wait_timeout_leaves_later_waits_working() -> None:
    """``app.wait(timeout=nan)`` MUST be refused before any timer is set: a NaN timer in
    the event loop's heap kept every later timeout of that loop from firing, so a later
    ``wait(timeout=…)`` and ``asyncio.wait_for`` never returned."""

    async def scenario() -> None:
        app = make_app()
        async with app:
            task = await app.submit("job", None, ALICE)  # no worker: pending forever
            with pytest.raises(InvalidInput, match="timeout"):
                await app.wait(task.id, ALICE, timeout=NAN)
            with pytest.raises(TaskTimeout):
                await app.wait(task.id, ALICE, timeout=MIN_INTERVAL_S)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(asyncio.Event().wait(), MIN_INTERVAL_S)

    _in_a_loop_of_its_own(scenario)


@pytest.mark.parametrize("value", [NAN, INF, -1, True, "5", MAX_WAIT_S * 2])
def test_ctx_sleep_refuses_a_bad_duration_and_the_worker_keeps_its_timers(
    value: Any,
) -> None:
    """``await ctx.sleep(value)`` with a bad duration MUST fail the run with
    ``InvalidInput`` naming ``seconds`` — never set a timer that would stop the worker's
    own timeouts from firing: a later run still times out."""

    async def scenario() -> None:
        app = make_app()

        @app.task
        async def napper(ctx: TaskContext) -> None:
            await ctx.sleep(value)

        @app.task(timeout=MIN_INTERVAL_S * 10)
        async def stuck(ctx: TaskContext) -> None:
            await asyncio.Event().wait()

        async with app, fast_worker(app):
            bad = await app.submit(napper, None, ALICE)
            done = await until(app, bad.id, ALICE, lambda s: s.terminal)
            assert done.error is not None
            assert ("InvalidInput", True) == (done.error.type, "seconds" in done.error.message)
            late = await app.submit(stuck, None, ALICE)
            timed = await until(app, late.id, ALICE, lambda s: s.terminal)
            assert timed.error is not None
            assert "TaskTimeout" == timed.error.type

    _in_a_loop_of_its_own(scenario)


@pytest.mark.parametrize(("argv", "what"), [
    (["worker", "m:app", "--lease", "inf"], "lease_for"),
    (["worker", "m:app", "--lease", str(MAX_LEASE_S + 1)], "lease_for"),
    (["worker", "m:app", "--lease", "nan"], "lease_for"),
    (["worker", "m:app", "--input-park", "-1"], "input_park"),
    (["worker", "m:app", "--reap-interval", "0"], "reap_interval"),
    (["worker", "m:app", "--reap-interval", "-5"], "reap_interval"),
    (["worker", "m:app", "--drain-timeout", "nan"], "drain_timeout"),
    (["worker", "m:app", "--drain-timeout", "-1"], "drain_timeout"),
    (["stress", "--timeout", "inf"], "--timeout"),
])
async def test_the_cli_refuses_a_bad_duration_before_it_starts(
    argv: list[str], what: str
) -> None:
    """A bad duration on the command line MUST be refused (``InvalidInput``: exit 2 from
    the console script) before the worker claims anything."""
    app = make_app()
    async with app:
        task = await app.submit("job", None, ALICE)
        console = Console(file=io.StringIO())
        with pytest.raises(InvalidInput, match=what):
            await run(argv, app=app, console=console)
        assert 0 == (await app.get(task.id, ALICE)).deliveries


def _console_script(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "durapp.py").write_text("from tasks_core import App\napp = App()\n")
    env = {k: v for k, v in os.environ.items() if k != "TASKS_STORE"}
    return subprocess.run(
        [sys.executable, "-m", "tasks_core.cli", "worker", "durapp:app", *argv],
        capture_output=True, text=True, timeout=TIMEOUT * 6, cwd=tmp_path, env=env,
    )


@pytest.mark.parametrize("argv", [["--lease", "inf"], ["--lease", "1e9"],
                                  ["--reap-interval", "0"], ["--reap-interval", "-1"]])
def test_tasks_worker_with_a_bad_duration_exits_2_at_once(
    argv: list[str], tmp_path: Path
) -> None:
    """``tasks worker --lease inf`` (or over the stores' cap) started and failed every
    claim with a traceback, never exiting; ``--reap-interval 0`` reaped in a busy loop.
    Each MUST exit 2 at once with one line, ``error: InvalidInput: …``."""
    proc = _console_script(tmp_path, "--store", "memory://", *argv)
    assert 2 == proc.returncode, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert 1 == len(errors), proc.stderr
    assert errors[0].startswith("error: InvalidInput: ")
    assert "Traceback" not in proc.stderr


def test_tasks_worker_on_a_store_it_cannot_reach_exits_2_at_once(tmp_path: Path) -> None:
    """A worker whose store cannot be opened at start (nothing answers; a full server's
    ``TooManyConnectionsError``) MUST exit 2 with one line naming ``StoreUnavailable``."""
    pytest.importorskip("tasks_store_sql")
    proc = _console_script(tmp_path, "--store", "postgresql://postgres@127.0.0.1:1/x")
    assert 2 == proc.returncode, proc.stderr
    assert 1 == len(proc.stderr.splitlines()), proc.stderr
    assert proc.stderr.startswith("error: StoreUnavailable: ")


class FailingWakeups(DelegatingStore):
    """``wait_for_work`` raises ``StoreUnavailable`` (a lost listening connection) until
    ``heal()``; the first wait after it answers "woken" at once."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.failures = 0
        self.failing = asyncio.Event()
        """Set at the third failure."""
        self.healed = False
        self.back = asyncio.Event()
        """Set by the first wait after ``heal()``."""

    async def wait_for_work(self, queues: Any, timeout: float) -> bool:
        if not self.healed:
            self.failures += 1
            if self.failures >= 3:
                self.failing.set()
            raise StoreUnavailable("the wakeup connection is lost")
        if not self.back.is_set():
            self.back.set()
            return True
        return bool(await self.inner.wait_for_work(queues, timeout))


async def test_a_wakeup_outage_is_logged_once_and_the_worker_polls_meanwhile(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker whose store's wakeups fail MUST log it once (a WARNING), not once per
    poll; MUST still find work by polling meanwhile; and MUST log once, at INFO, when
    wakeups work again."""
    inner = MemoryStore()
    store = FailingWakeups(inner)
    app = make_app(store=store)
    elsewhere = App(store=inner, poll_interval=0.01)  # its submits wake nobody here

    @app.task
    async def job(ctx: TaskContext) -> str:
        return "polled"

    caplog.set_level(logging.INFO, logger="tasks_core.worker")
    async with app, elsewhere, fast_worker(app):
        await asyncio.wait_for(store.failing.wait(), TIMEOUT)
        task = await elsewhere.submit("job", None, ALICE)
        done = await until(app, task.id, ALICE, lambda s: s.terminal)
        assert ("polled", True) == (done.result, store.failures >= 3)
        store.healed = True
        await asyncio.wait_for(store.back.wait(), TIMEOUT)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records
             if r.getMessage().startswith("waiting for work")]
    assert [logging.WARNING, logging.INFO] == [level for level, _ in lines], lines
    assert "the wakeup connection is lost" in lines[0][1]


class FailingClaims(DelegatingStore):
    """``claim_next`` raises ``StoreUnavailable`` for its first ``failures`` calls."""

    def __init__(self, inner: Any, failures: int) -> None:
        super().__init__(inner)
        self.failures = failures

    async def claim_next(self, *args: Any, **kwargs: Any) -> Any:
        self.failures -= 1
        if self.failures >= 0:
            raise StoreUnavailable("the store is down")
        return await self.inner.claim_next(*args, **kwargs)


async def test_a_claim_outage_is_logged_once_when_it_begins_and_once_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker whose claims fail while the store is out MUST log one WARNING when they
    begin to fail and one INFO when a claim works again — not a line per backoff (a 40 s
    outage logged 44 of them) — and MUST run the task once the store is back."""
    store = FailingClaims(MemoryStore(), failures=6)
    app = make_app(store=store)

    @app.task
    async def job(ctx: TaskContext) -> str:
        return "claimed"

    caplog.set_level(logging.DEBUG, logger="tasks_core")
    caplog.set_level(logging.DEBUG, logger="tasks_core.worker")
    async with app:
        task = await app.submit(job, None, ALICE)
        async with fast_worker(app):
            done = await until(app, task.id, ALICE, lambda s: s.terminal)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if ": claiming" in r.getMessage()]
    assert ("claimed", True) == (done.result, store.failures < 0)
    assert [logging.WARNING, *[logging.DEBUG] * 5, logging.INFO] == [lvl for lvl, _ in lines]
    assert lines[0][1].endswith("claiming failed; backing off until it works again (logged "
                                "once): the store is down"), lines[0]


class RefusingClaims(DelegatingStore):
    """``claim_next`` refuses with ``error`` (a store refusal, not an outage) from call
    number ``after`` on."""

    def __init__(self, inner: Any, error: Exception, after: int = 0) -> None:
        super().__init__(inner)
        self.error, self.after, self.calls = error, after, 0
        self.refused_twice = asyncio.Event()

    async def claim_next(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls > self.after:
            if self.calls >= self.after + 2:
                self.refused_twice.set()
            raise self.error
        return await self.inner.claim_next(*args, **kwargs)


async def test_a_store_that_refuses_the_first_claims_stops_the_worker_with_its_error() -> None:
    """A worker whose first claims the store refuses as a store error, not an outage (a
    read-only SQLite file, a privilege missing) MUST stop with that error (``run()`` raises
    it: ``tasks worker`` exits 2) instead of serving nothing for ever; an outage at start
    MUST NOT stop it, nor a refusal after a claim worked."""
    refusal = StoreError("SQLite refused the operation: the database file is read-only here")
    app = make_app(store=RefusingClaims(MemoryStore(), refusal))
    async with app:
        with pytest.raises(StoreError, match="read-only here"):
            await asyncio.wait_for(fast_worker(app).run(), TIMEOUT)
    store = RefusingClaims(MemoryStore(), refusal, after=1)
    later = make_app(store=store)
    async with later:
        worker = fast_worker(later)
        serving = asyncio.create_task(worker.run())
        await asyncio.wait_for(store.refused_twice.wait(), TIMEOUT)
        assert not serving.done()  # refused twice after a claim worked: still serving
        await worker.shutdown()
        await serving


async def test_the_worker_drains_for_its_drain_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``Worker(drain_timeout=…)`` (``app.worker(drain_timeout=…)``) MUST be the drain of
    ``async with`` (it was a fixed 5 s) and of ``shutdown()`` without an argument."""
    app = make_app()
    release = asyncio.Event()

    @app.task
    async def stubborn(ctx: TaskContext) -> None:
        await release.wait()  # ignores the shutdown token

    caplog.set_level(logging.INFO, logger="tasks_core.worker")
    async with app:
        task = await app.submit(stubborn, None, ALICE)
        worker = app.worker(drain_timeout=0.01, poll_interval=0.02, reap_interval=None)
        async with worker:
            await until(app, task.id, ALICE, lambda s: s.status == TaskStatus.RUNNING)
        assert not await worker.shutdown()  # the drain ended unsettled: it is over
        assert [task.id] == worker.running
        release.set()
        await until(app, task.id, ALICE, lambda s: s.terminal)
    assert any("shutting down (drain 0.01s)" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("text", ["2031-12-24T09:00Z", "2031-12-24T09:00z",
                                  "2031-12-24t09:00z", "2031-12-24T10:00+01:00"])
def test_an_instant_on_the_command_line_takes_rfc_3339_s_spellings(text: str) -> None:
    """``--at`` MUST take an instant as RFC 3339 writes it, its ``Z`` and ``T`` in either
    case (RFC 3339 §5.6), as the same UTC instant."""
    assert datetime(2031, 12, 24, 9, tzinfo=UTC) == parse_instant(text, "--at")


@pytest.mark.parametrize(("text", "message"), [
    ("2027-02-30T09:00Z", "--at is not a real instant (day is out of range for month): "
                          "'2027-02-30T09:00Z'"),
    ("2027-01-01T25:00Z", "--at is not a real instant (hour must be in 0..23): "
                          "'2027-01-01T25:00Z'"),
    ("next tuesday", "--at must be an ISO 8601 instant with a time zone, e.g. "
                     "2026-12-24T09:00Z, not 'next tuesday'"),
])
def test_an_impossible_instant_on_the_command_line_says_what_is_wrong(
    text: str, message: str
) -> None:
    """``--at 2027-02-30T09:00Z`` read "must be an ISO 8601 instant with a time zone", which
    it is: a date or time that does not exist MUST be refused saying so."""
    with pytest.raises(InvalidInput) as refused:
        parse_instant(text, "--at")
    assert message == str(refused.value)
