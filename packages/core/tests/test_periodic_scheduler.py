"""The scheduler on a memory store driven by an injected clock: which ticks a pass creates
(first start, downtime, ``catch_up``), that any number of schedulers create each tick once,
the tick's task, its retention, failures, the worker's ``periodic`` option and the
``tasks periodic`` command."""

from __future__ import annotations

import asyncio
import io
import logging
from datetime import datetime
from typing import Any

import pytest
from _runtime_kit import ALICE, TIMEOUT, DelegatingStore, fast_worker, make_app, until
from rich.console import Console
from tasks_core import (
    App,
    Completed,
    InvalidInput,
    ManualClock,
    RetryPolicy,
    StoreUnavailable,
    System,
    TaskContext,
    TaskNotFound,
    TaskStatus,
)
from tasks_core.cli import build_parser, run
from tasks_core.periodic import Schedule
from tasks_core.runtime import _scheduler
from tasks_core.runtime._scheduler import MAX_SLEEP_S, Scheduler
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio

EVERY = 60.0


def _app(clock: ManualClock, *, store: Any = None, **periodic: Any) -> App:
    """An app with one schedule, ``tick`` (``every=EVERY`` unless told otherwise)."""
    app = make_app(clock, store=store)
    options = {"every": EVERY, **periodic}

    @app.periodic(**options)
    @app.task(retry=RetryPolicy.fixed(5, attempts=3), timeout=30, max_deliveries=4,
              retention=1, priority=7)
    async def tick(ctx: TaskContext, region: str = "eu") -> str:
        return region

    return app


def _scheduler_of(app: App) -> Scheduler:
    """A fresh scheduler of ``app`` (a restarted worker's)."""
    assert app._store is not None
    return Scheduler(app._store, app.tasks, app.schedules, notify=app.notices.work.notify)


async def _tick_ids(app: App) -> list[str]:
    page = await app.list(System(), limit=1000)
    return sorted(s.id for s in page if s.id.startswith("::periodic:"))


async def _created(app: App, check: Any) -> None:
    """Until ``await check()`` holds, wait for the app's work notices (a scheduler's
    create sends one); bounded by ``TIMEOUT``."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            version = app.notices.work.version
            if await check():
                return
            await app.notices.work.wait(version, 0.01)


async def _stored(app: App, task_id: str) -> bool:
    try:
        await app.get(task_id, System())
    except TaskNotFound:
        return False
    return True


def _ids(schedule: Schedule, ticks: list[datetime]) -> list[str]:
    return sorted(schedule.task_id(t) for t in ticks)


@pytest.mark.parametrize("catch_up", [1, 3])
async def test_the_first_start_creates_the_catch_up_latest_ticks(catch_up: int) -> None:
    """With no tick of the schedule stored, a pass MUST create the ``catch_up`` latest
    ticks at or before the store's ``now`` (one by default), and nothing else."""
    clock = ManualClock()
    app = _app(clock, catch_up=catch_up)
    schedule = app.schedules["tick"]
    async with app:
        await _scheduler_of(app).run_once()
        assert _ids(schedule, schedule.recent(clock.now(), catch_up)) == await _tick_ids(app)


async def test_passes_and_schedulers_create_each_tick_once() -> None:
    """Passes of any number of schedulers at the same store instant MUST create each tick
    once: a second creator finds it made (``TaskExists``) and creates nothing."""
    clock = ManualClock()
    app = _app(clock, catch_up=4)
    schedule = app.schedules["tick"]
    async with app:
        schedulers = [_scheduler_of(app) for _ in range(5)]
        created = await asyncio.gather(*(s.catch_up(schedule, clock.now()) for s in schedulers))
        assert 4 == sum(created)
        assert [0] * 5 == [await s.catch_up(schedule, clock.now()) for s in schedulers]
        assert _ids(schedule, schedule.recent(clock.now(), 4)) == await _tick_ids(app)


@pytest.mark.parametrize(("catch_up", "down"), [(1, 5), (3, 5), (10, 5)])
async def test_after_a_downtime_only_the_latest_missed_ticks_run(catch_up: int,
                                                                 down: int) -> None:
    """After ``down`` ticks without a scheduler, a restarted one MUST create the missed
    ticks — those after the newest stored one — but at most the ``catch_up`` latest."""
    clock = ManualClock()
    app = _app(clock, catch_up=catch_up)
    schedule = app.schedules["tick"]
    async with app:
        await _scheduler_of(app).run_once()
        before = await _tick_ids(app)
        clock.advance(down * EVERY)
        await _scheduler_of(app).run_once()
        missed = schedule.recent(clock.now(), down)
        assert _ids(schedule, missed[:catch_up]) == sorted(set(await _tick_ids(app)) - set(before))


async def test_the_tick_task_is_the_schedule_s() -> None:
    """A tick's task MUST have no owner, tenant ``default``, the schedule's queue and
    input, the task's retry, timeout, delivery limit and priority, its own id as
    idempotency key and no ttl; System sees it, an owner does not."""
    clock = ManualClock()
    app = _app(clock, queue="ticks", input={"region": "us"})
    async with app:
        await _scheduler_of(app).run_once()
        (task_id,) = await _tick_ids(app)
        s = await app.get(task_id, System("default"))
        definition = app.tasks["tick"]
        assert (None, "default", "ticks", {"region": "us"}, None) == (
            s.owner, s.tenant, s.queue, s.work.input, s.ttl_s)
        assert (definition.retry, definition.timeout, definition.max_deliveries, task_id) == (
            s.work.retry_policy, s.work.timeout_s, s.work.max_deliveries,
            s.work.idempotency_key)
        assert definition.priority == s.priority
        with pytest.raises(TaskNotFound):
            await app.get(task_id, ALICE)


async def test_a_finished_tick_outlives_every_pass_that_reads_it_back() -> None:
    """A finished tick (its task's retention a second) MUST stay stored, reaped or not,
    while it is among the ``catch_up`` latest ticks — so no restarted scheduler creates it
    a second time — and a pass creates only the new ticks."""
    clock = ManualClock()
    app = _app(clock, catch_up=3)
    schedule = app.schedules["tick"]
    store = app.store
    async with app:
        await _scheduler_of(app).run_once()
        first = schedule.recent(clock.now(), 3)[-1]
        claim = await store.claim(schedule.task_id(first), "w", 30)
        await store.transition(claim.snapshot.id, claim.snapshot.revision,
                               Completed(event_id="done", result=None), claim.lease)
        run_id = claim.snapshot.run_id
        while first in schedule.recent(clock.now(), 3):
            await app.reap(System())
            await _scheduler_of(app).run_once()
            kept = await store.get(schedule.task_id(first), tenant=None)
            assert (run_id, TaskStatus.COMPLETED) == (kept.run_id, kept.status)
            clock.advance(EVERY / 2)
        assert len(await _tick_ids(app)) == len(set(await _tick_ids(app)))


async def test_a_pass_says_how_long_until_the_next_tick_on_the_store_clock() -> None:
    """``run_once`` MUST answer the store-clock time to the next tick of any schedule,
    at most ``MAX_SLEEP_S``."""
    clock = ManualClock()
    app = _app(clock)
    app.periodic(app.tasks["tick"], cron="0 0 1 1 *", name="yearly")
    schedule = app.schedules["tick"]
    async with app:
        following = schedule.following(clock.now())
        assert following is not None
        clock.advance((following - clock.now()).total_seconds() - 1.5)
        assert 1.5 == await _scheduler_of(app).run_once()
        quiet = _app(clock, every=86400)
        async with quiet:
            assert MAX_SLEEP_S == await _scheduler_of(quiet).run_once()


async def test_the_loop_wakes_at_once_on_stop() -> None:
    """``run(stop)`` MUST return as soon as ``stop`` is set, however far the next tick."""
    clock = ManualClock()
    app = _app(clock, every=86400)
    async with app:
        stop = asyncio.Event()
        loop = asyncio.create_task(_scheduler_of(app).run(stop))
        await _created(app, lambda: _tick_ids(app))
        stop.set()
        await asyncio.wait_for(loop, TIMEOUT)


class FlakyStore(DelegatingStore):
    """``now()`` fails ``failures`` times, then answers; ``passes`` is set once it has."""

    def __init__(self, inner: Any, failures: int) -> None:
        super().__init__(inner)
        self.failures = failures
        self.answered = asyncio.Event()

    async def now(self) -> datetime:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("down")
        self.answered.set()
        result: datetime = await self.inner.now()
        return result


async def test_a_failed_pass_is_logged_and_tried_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A pass that fails (the store unavailable) MUST be logged — a warning, no traceback
    — and tried again after ``RETRY_S`` (doubled for each further failure), the loop
    going on."""
    retry = 0.01
    monkeypatch.setattr(_scheduler, "RETRY_S", retry)
    clock = ManualClock()
    store = FlakyStore(MemoryStore(clock=clock), failures=2)
    app = _app(clock, store=store)
    async with app:
        stop = asyncio.Event()
        with caplog.at_level(logging.WARNING, logger="tasks_core.periodic"):
            loop = asyncio.create_task(_scheduler_of(app).run(stop))
            await asyncio.wait_for(store.answered.wait(), TIMEOUT)
            await _created(app, lambda: _tick_ids(app))
            stop.set()
            await asyncio.wait_for(loop, TIMEOUT)
        failed = [r for r in caplog.records if "a pass failed" in r.getMessage()]
        assert [(logging.WARNING, None)] * 2 == [(r.levelno, r.exc_info) for r in failed]
        assert [f"{retry:g}s", f"{retry * 2:g}s"] == [r.getMessage().rsplit(" ", 1)[1]
                                                       for r in failed]


async def test_a_tick_refused_for_capacity_is_created_by_a_later_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tick the store refuses (``max_tasks``) MUST NOT count as created: a later pass,
    once there is room, creates it. The refusal is a warning once per tick, not at every
    pass (a full store flooded the log with a line a second per worker)."""
    clock = ManualClock()
    app = _app(clock, store=MemoryStore(clock=clock, max_tasks=1))
    async with app:
        other = await app.submit("tick", None, ALICE)
        scheduler = _scheduler_of(app)
        with caplog.at_level(logging.DEBUG, logger="tasks_core.periodic"):
            for _ in range(3):
                await scheduler.run_once()
        assert [] == await _tick_ids(app)
        refusals = [r.levelno for r in caplog.records if "refused" in r.getMessage()]
        assert [logging.WARNING, logging.DEBUG, logging.DEBUG] == refusals
        await app.cancel(other.id, ALICE)
        await app.release(other.id, System())
        await scheduler.run_once()
        assert 1 == len(await _tick_ids(app))


async def test_a_worker_runs_the_schedules_unless_told_not_to() -> None:
    """A worker MUST run the scheduler by default (the tick runs); ``periodic=False``
    MUST NOT (a worker that served another task created no tick)."""
    clock = ManualClock()
    app = _app(clock)
    schedule = app.schedules["tick"]
    latest = schedule.latest(clock.now())
    assert latest is not None
    async with app:
        async with fast_worker(app, periodic=False):
            done = await app.submit("tick", None, ALICE)
            await until(app, done.id, ALICE, lambda s: s.terminal)
        assert [] == await _tick_ids(app)
        async with fast_worker(app):
            await _created(app, lambda: _stored(app, schedule.task_id(latest)))
            ran = await until(app, schedule.task_id(latest), System(),
                              lambda s: s.terminal)
        assert (TaskStatus.COMPLETED, "eu") == (ran.status, ran.result)
    with pytest.raises(InvalidInput, match="periodic"):
        fast_worker(app, periodic="no")


async def test_a_worker_s_scheduler_follows_a_manual_clock_within_its_poll_interval() -> None:
    """A worker's scheduler MUST read the store clock again at least every
    ``poll_interval``: moving a ``ManualClock`` past the next tick makes that tick's task
    (the way tests drive retries and delayed tasks), not only after ``MAX_SLEEP_S`` of
    real time."""
    clock = ManualClock()
    app = _app(clock)
    schedule = app.schedules["tick"]
    async with app, fast_worker(app):
        first = schedule.latest(clock.now())
        assert first is not None
        await _created(app, lambda: _stored(app, schedule.task_id(first)))
        clock.advance(EVERY)
        second = schedule.latest(clock.now())
        assert second is not None
        assert second > first
        await _created(app, lambda: _stored(app, schedule.task_id(second)))


async def _cli(app: App, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = await run(list(argv), app=app, console=Console(file=out, width=250,
                                                          color_system=None))
    return code, out.getvalue()


async def test_tasks_periodic_lists_last_and_next_ticks() -> None:
    """``tasks periodic --app APP`` MUST list each schedule with its last tick (whether
    its task exists, and its status) and its next tick, on the store's clock."""
    clock = ManualClock()
    app = _app(clock)
    app.periodic(app.tasks["tick"], cron="30 2 * * *", tz="Europe/Paris", name="nightly")
    schedule = app.schedules["tick"]
    latest, following = schedule.latest(clock.now()), schedule.following(clock.now())
    assert latest is not None
    assert following is not None
    async with app:
        code, out = await _cli(app, "periodic", "--app", "probe:app", "--system")
        assert 0 == code
        rows = _rows(out)
        assert {"tick", "nightly"} == set(rows)
        assert [f"{latest:%Y-%m-%d %H:%M:%S}Z", "not created",
                f"{following:%Y-%m-%d %H:%M:%S}Z"] == rows["tick"][5:8]
        assert "cron 30 2 * * * (Europe/Paris)" == rows["nightly"][2]
        await _scheduler_of(app).run_once()
        _, out = await _cli(app, "periodic", "--app", "probe:app", "--system")
        assert "pending" == _rows(out)["tick"][6]
        _, out = await _cli(make_app(clock), "periodic", "--app", "probe:app", "--system")
        assert "no periodic schedules in probe:app" in out


async def test_tasks_periodic_shows_a_sub_second_schedule_as_it_ticks() -> None:
    """A schedule of ``every=1.5`` MUST show its ticks to the millisecond (the tick id
    ``tasks show`` takes names it so), and an interval as the schedule rounds it to whole
    milliseconds, in digits (``every=1.0005`` ticks every second; the longest allowed
    interval is not written in exponent form)."""
    clock = ManualClock()
    app = _app(clock, every=1.5)
    app.periodic(app.tasks["tick"], every=1.0005, name="rounded")
    app.periodic(app.tasks["tick"], every=31_622_400, name="yearly")
    schedule = app.schedules["tick"]
    following = schedule.following(clock.now())
    assert following is not None
    async with app:
        _, out = await _cli(app, "periodic", "--app", "probe:app", "--system")
    rows = _rows(out)
    shown = following.strftime("%Y-%m-%d %H:%M:%S.") + f"{following.microsecond // 1000:03d}Z"
    assert shown == rows["tick"][7]
    assert ("every 1.5s", "every 1s", "every 31622400s") == (
        rows["tick"][2], rows["rounded"][2], rows["yearly"][2])


def _rows(out: str) -> dict[str, list[str]]:
    """The table's rows by schedule name: their cells (name, task, when, queue, catch up,
    last tick, last run, next tick)."""
    cells = ([cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines())
    return {row[0]: row for row in cells if len(row) == 8 and row[0] != "schedule"}


def test_tasks_worker_no_periodic_opts_out() -> None:
    """``tasks worker APP --no-periodic`` MUST start a worker without the scheduler."""
    from tasks_core.cli._worker_cmd import _worker_of

    app = _app(ManualClock())
    parser = build_parser()
    assert _worker_of(app, parser.parse_args(["worker", "m:app"])).periodic
    assert not _worker_of(app, parser.parse_args(["worker", "m:app", "--no-periodic"])).periodic
