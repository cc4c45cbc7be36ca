"""Periodic schedules without a store: tick arithmetic (every, cron, time zones, DST), the
derived task ids, and every refusal of ``@app.periodic`` at declaration time."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from _runtime_kit import make_app
from hypothesis import given
from hypothesis import strategies as st
from tasks_core import InvalidInput, Owner, TaskContext, owner_of, scoped_task_key
from tasks_core.authority import check_task_id
from tasks_core.durations import MAX_KEEP_S, MAX_WAIT_S
from tasks_core.periodic import MAX_CATCH_UP, MIN_EVERY_S, TICK_PREFIX, Schedule
from tasks_core.random_ids import random_task_id

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PARIS = ZoneInfo("Europe/Paris")
NOW = datetime(2030, 1, 7, 12, 34, 56, 789000, tzinfo=UTC)

instants = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1),
                        timezones=st.just(UTC)).map(lambda d: d.replace(
                            microsecond=d.microsecond // 1000 * 1000))


def _every(seconds: float, **options: Any) -> Schedule:
    return Schedule(name="s", task="t", every=seconds, **options)


def _cron(expr: str, tz: str | None = None, **options: Any) -> Schedule:
    return Schedule(name="s", task="t", cron=expr, tz=tz, **options)


# -- every ---------------------------------------------------------------------------------


@given(now=instants, seconds=st.sampled_from([1, 1.5, 7, 60, 300, 3600, 86400, 7 * 86400]))
def test_every_ticks_are_the_multiples_of_the_interval_since_the_epoch(
    now: datetime, seconds: float
) -> None:
    """The ticks of ``every=N`` MUST be the instants ``k × N`` since the Unix epoch: the
    latest at or before ``now``, the next after it, one interval apart."""
    schedule = _every(seconds)
    period = timedelta(seconds=seconds)
    latest, following = schedule.latest(now), schedule.following(now)
    assert latest is not None
    assert following is not None
    assert latest <= now < following
    assert following - latest == period
    assert (latest - EPOCH) % period == timedelta(0)


def test_recent_ticks_are_the_latest_first_one_interval_apart() -> None:
    """``recent(now, n)`` MUST be the ``n`` latest ticks at or before ``now``, newest
    first; a tick exactly at ``now`` is one of them."""
    schedule = _every(60)
    ticks = schedule.recent(NOW, 4)
    assert schedule.latest(NOW) == ticks[0]
    assert [timedelta(seconds=60)] * 3 == [a - b for a, b in itertools.pairwise(ticks)]
    assert ticks[0] == schedule.recent(ticks[0], 1)[0]


# -- cron ------------------------------------------------------------------------------------


def _weekday_nines(first: date, last: date) -> list[datetime]:
    """09:00 Paris time of every Monday..Friday from ``first`` to ``last``, in UTC."""
    days = (first + timedelta(days=n) for n in range((last - first).days + 1))
    return [datetime.combine(d, time(9), tzinfo=PARIS).astimezone(UTC) for d in days
            if d.weekday() < 5]


def test_cron_ticks_are_read_in_the_schedule_time_zone() -> None:
    """``cron="0 9 * * mon-fri", tz="Europe/Paris"`` MUST tick at 09:00 Paris time on
    weekdays — across a change of the UTC offset (March 2030) too."""
    schedule = _cron("0 9 * * mon-fri", "Europe/Paris")
    expected = _weekday_nines(date(2030, 3, 20), date(2030, 4, 10))
    now = expected[-1]
    ticks = schedule.recent(now, len(expected))
    assert expected == sorted(ticks)
    assert expected[1] == schedule.following(expected[0])


def test_cron_defaults_to_utc() -> None:
    """Without ``tz`` a cron expression MUST be read in UTC."""
    schedule = _cron("15 3 * * *")
    latest = schedule.latest(NOW)
    assert latest is not None
    assert (3, 15, 0) == (latest.hour, latest.minute, latest.second)
    assert latest <= NOW < latest + timedelta(days=1)


def test_a_tick_at_now_is_the_latest_and_the_next_one_is_after_it() -> None:
    """At exactly a tick's instant that tick MUST be the latest, and ``following`` the
    one after it (a scheduler waking on time creates it)."""
    schedule = _cron("*/5 * * * *")
    tick = datetime(2030, 1, 1, 10, 5, tzinfo=UTC)
    assert tick == schedule.latest(tick)
    assert tick + timedelta(minutes=5) == schedule.following(tick)
    assert tick - timedelta(minutes=5) == schedule.latest(tick - timedelta(milliseconds=1))


def test_dst_spring_forward_runs_a_skipped_0230_job_at_0300() -> None:
    """cronsim (like Debian cron) runs a job whose local time is skipped by the spring
    forward (02:30 on 2030-03-31 in Paris) when the clock jumps: 03:00 CEST, once."""
    schedule = _cron("30 2 * * *", "Europe/Paris")
    day_after = datetime(2030, 4, 1, 12, tzinfo=UTC)
    ticks = sorted(schedule.recent(day_after, 3))
    local = [t.astimezone(PARIS) for t in ticks]
    assert [(date(2030, 3, 30), time(2, 30)), (date(2030, 3, 31), time(3, 0)),
            (date(2030, 4, 1), time(2, 30))] == [(t.date(), t.time()) for t in local]


def test_dst_fall_back_runs_a_0230_job_once() -> None:
    """On the fall back (2030-10-27 in Paris) 02:30 happens twice; a daily job MUST run
    once, at the first 02:30 (CEST, UTC+2)."""
    schedule = _cron("30 2 * * *", "Europe/Paris")
    day_after = datetime(2030, 10, 28, 12, tzinfo=UTC)
    ticks = sorted(schedule.recent(day_after, 3))
    on_the_day = [t for t in ticks if t.astimezone(PARIS).date() == date(2030, 10, 27)]
    assert 1 == len(on_the_day)
    assert timedelta(hours=2) == on_the_day[0].astimezone(PARIS).utcoffset()


def test_dst_fall_back_runs_a_sub_hourly_job_in_both_hours() -> None:
    """A job more frequent than hourly is "scheduled normally" (cronsim, Debian cron): on
    the fall back its ticks stay 30 minutes apart in UTC, both 02:xx hours included."""
    schedule = _cron("*/30 * * * *", "Europe/Paris")
    after = datetime(2030, 10, 27, 3, tzinfo=UTC)
    ticks = sorted(schedule.recent(after, 8))
    assert [timedelta(minutes=30)] * 7 == [b - a for a, b in itertools.pairwise(ticks)]


def test_a_cron_schedule_never_ticks_twice_for_two_nows() -> None:
    """Schedulers read the ticks at different instants: the ticks they agree exist MUST
    be the same instants (so they derive the same ids)."""
    schedule = _cron("*/7 1-3 * * *", "Europe/Paris")
    end = datetime(2030, 10, 28, tzinfo=UTC)
    whole = schedule.recent(end, 200)
    assert whole == [schedule.latest(tick) for tick in whole]  # the repeated hour too
    for cut in whole[1::17]:
        assert whole[whole.index(cut):][:10] == schedule.recent(cut, 10)
        assert whole[whole.index(cut) - 1] == schedule.following(cut)


# -- ids -------------------------------------------------------------------------------------


def test_tick_ids_are_valid_task_ids_named_by_schedule_and_instant() -> None:
    """A tick's id MUST be a valid task id built from the schedule name and the tick as a
    UTC ISO instant with milliseconds; other ticks and schedules get other ids."""
    schedule = _cron("0 9 * * *", "Europe/Paris")
    tick = schedule.latest(NOW)
    assert tick is not None
    task_id = schedule.task_id(tick)
    assert check_task_id(task_id) == task_id
    assert task_id == f"{TICK_PREFIX}s:{tick.astimezone(UTC).isoformat()[:19]}.000Z"
    assert task_id != schedule.task_id(tick + timedelta(days=1))
    other = Schedule(name="s2", task="t", cron="0 9 * * *", tz="Europe/Paris")
    assert task_id != other.task_id(tick)


def test_tick_of_reads_a_tick_id_back() -> None:
    """``tick_of`` MUST give back the tick of the schedule's own ids, and ``None`` for an
    id of another schedule or any other id."""
    schedule, other = _every(1.5), Schedule(name="s:x", task="t", every=1.5)
    for tick in schedule.recent(NOW, 3):
        assert tick == schedule.tick_of(schedule.task_id(tick))
        assert other.tick_of(schedule.task_id(tick)) is None
        assert schedule.tick_of(other.task_id(tick)) is None
    for task_id in ("alice::k", random_task_id(), f"{TICK_PREFIX}s:2030-01-01T00:00:00Z",
                    f"{TICK_PREFIX}s:2030-01-01T00:00:00.5Z"):
        assert schedule.tick_of(task_id) is None


@given(key=st.text(min_size=1, max_size=40), user=st.text(min_size=1, max_size=10),
       tenant=st.sampled_from(["default", "acme"]), dedup=st.sampled_from(["owner", "global"]))
def test_no_keyed_submit_can_name_a_tick(key: str, user: str, tenant: str, dedup: str) -> None:
    """No id a keyed submit builds — owner or global, any tenant — MUST begin like a tick's
    id: an owner cannot forge (or squat) a tick."""
    try:
        task_id = scoped_task_key(key, Owner(user, tenant), dedup=dedup)
    except InvalidInput:
        return
    assert not task_id.startswith(TICK_PREFIX)


def test_a_tick_is_no_owner_s_and_no_random_id() -> None:
    """A tick's id names no owner, and random ids never begin like one."""
    task_id = _every(60).task_id(NOW)
    assert owner_of(task_id) is None
    assert not any(random_task_id().startswith(TICK_PREFIX) for _ in range(100))


# -- retention -------------------------------------------------------------------------------


@pytest.mark.parametrize("catch_up", [1, 3])
def test_retention_outlasts_the_ticks_a_scheduler_reads_back(catch_up: int) -> None:
    """A tick's retention MUST reach past the ``catch_up + 1``-th tick after it (a finished
    tick outlives every pass that could probe it), keep a longer retention of the task,
    keep "until deleted" (``None``) and stay within ``MAX_KEEP_S``."""
    for schedule in (_every(300, catch_up=catch_up),
                     _cron("0 9 * * mon-fri", "Europe/Paris", catch_up=catch_up)):
        tick = schedule.latest(NOW)
        assert tick is not None
        beyond: datetime | None = tick
        for _ in range(catch_up + 1):
            assert beyond is not None
            beyond = schedule.following(beyond)
        assert beyond is not None
        retention = schedule.retention_for(tick, 1.0)
        assert retention is not None
        assert tick + timedelta(seconds=retention) >= beyond
        assert MAX_KEEP_S == schedule.retention_for(tick, MAX_KEEP_S)
        assert schedule.retention_for(tick, None) is None


# -- refusals at declaration -------------------------------------------------------------


async def handler(ctx: TaskContext, region: str = "eu") -> None:
    """A periodic handler of these tests."""


@pytest.mark.parametrize(("options", "words"), [
    ({}, "exactly one"),
    ({"cron": "* * * * *", "every": 60}, "exactly one"),
    ({"cron": "61 * * * *"}, "not a valid expression"),
    ({"cron": "* * * *"}, "not a valid expression"),
    ({"cron": 5}, "cron must be a string"),
    ({"cron": "0 0 30 2 *"}, "cron"),
    ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "not a known IANA time zone"),
    ({"cron": "* * * * *", "tz": "../../etc/passwd"}, "not a known IANA time zone"),
    ({"cron": "* * * * *", "tz": ""}, "IANA"),
    ({"every": 60, "tz": "Europe/Paris"}, "tz applies to cron"),
    ({"every": 0}, "every"),
    ({"every": -5}, "every"),
    ({"every": MIN_EVERY_S / 2}, "every"),
    ({"every": MAX_WAIT_S * 2}, "every"),
    ({"every": math.nan}, "every"),
    ({"every": math.inf}, "every"),
    ({"every": True}, "every"),
    ({"every": "60"}, "every"),
    ({"every": 60, "catch_up": 0}, "catch_up"),
    ({"every": 60, "catch_up": MAX_CATCH_UP + 1}, "catch_up"),
    ({"every": 60, "catch_up": True}, "catch_up"),
    ({"every": 60, "catch_up": 1.5}, "catch_up"),
    ({"every": 60, "name": "a::b"}, "schedule name"),
    ({"every": 60, "name": ""}, "schedule name"),
    ({"every": 60, "queue": "bad::queue"}, "queue"),
    ({"every": 60, "input": {"regoin": "eu"}}, "does not match"),
    ({"every": 60, "input": {"region": math.nan}}, "input"),
    ({"every": 60, "input": ["region"]}, "input"),
])
def test_a_bad_schedule_is_refused_and_registers_nothing(
    options: dict[str, Any], words: str
) -> None:
    """Every bad option MUST be refused by ``@app.periodic`` itself with ``InvalidInput``
    naming it — and neither the task nor a schedule nor a queue is registered."""
    app = make_app()
    queues = dict(app.queues)
    with pytest.raises(InvalidInput, match=words):
        app.periodic(**options)(handler)
    assert ({}, {}, queues) == (app.tasks, app.schedules, dict(app.queues))


def test_a_duplicate_schedule_name_is_refused() -> None:
    """Two schedules MUST NOT share a name (the name is in every tick's id)."""
    app = make_app()
    task = app.periodic(every=60)(handler)
    with pytest.raises(InvalidInput, match="already declared"):
        app.periodic(task, cron="0 * * * *")
    app.periodic(task, cron="0 * * * *", name="hourly")
    assert ["handler", "hourly"] == sorted(app.schedules)


def test_periodic_registers_a_function_or_adds_to_a_task() -> None:
    """On a function ``@app.periodic`` MUST register the task (as ``@app.task``) and
    return it; above ``@app.task`` it MUST add a schedule to that task; a task of another
    app is refused."""
    app = make_app()

    @app.periodic(every=300, queue="reports", input={"region": "us"})
    async def report(ctx: TaskContext, region: str) -> None: ...

    @app.periodic(cron="0 9 * * mon-fri", tz="Europe/Paris", name="mornings", catch_up=3)
    @app.task(queue="slow", timeout=60)
    async def digest(ctx: TaskContext) -> None: ...

    assert {"report": report, "digest": digest} == app.tasks
    assert "reports" == report.queue
    assert ("report", "reports", {"region": "us"}, 300.0) == (
        app.schedules["report"].task, app.schedules["report"].queue,
        app.schedules["report"].input, app.schedules["report"].every)
    mornings = app.schedules["mornings"]
    assert ("digest", "slow", "Europe/Paris", 3) == (mornings.task, mornings.queue,
                                                      mornings.tz, mornings.catch_up)
    with pytest.raises(InvalidInput, match="not registered with this app"):
        make_app().periodic(digest, every=60)
