"""A duration may be given as a ``timedelta`` wherever the public API takes seconds
(``tasks_core.durations.Seconds``), as Temporal, arq and RQ users write them: the one check,
``check_duration``, reads its total seconds and holds it to the option's bounds like a
number; what is kept is the ``float`` of seconds."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from _runtime_kit import ALICE, make_app
from tasks_core import InvalidInput, RetryPolicy, TaskStatus, Worker
from tasks_core.durations import check_duration
from test_durations import OPTIONS, Option

pytestmark = pytest.mark.anyio

PUBLIC = [o for o in OPTIONS if not o.what.endswith("_s")]
"""The options of the API (the stored models' ``*_s`` fields take seconds only)."""


GOOD = [pytest.param(o, s, id=f"{o.name}={s!r}s") for o in PUBLIC for s in o.good()]
BAD = [pytest.param(o, s, id=f"{o.name}={s!r}s") for o in PUBLIC for s in (-1.5, o.high * 2)]


@pytest.mark.parametrize(("option", "seconds"), GOOD)
async def test_every_duration_of_the_api_takes_a_timedelta_within_its_bounds(
    option: Option, seconds: float
) -> None:
    """The option's cap and its smallest value given as ``timedelta`` MUST be taken."""
    app = make_app()
    async with app:
        await option.apply(app, timedelta(seconds=seconds))


@pytest.mark.parametrize(("option", "seconds"), BAD)
async def test_a_timedelta_out_of_range_is_refused_naming_the_option(
    option: Option, seconds: float
) -> None:
    """A negative ``timedelta`` and one past the cap MUST be refused like the number of its
    seconds, naming the option and the seconds given."""
    app = make_app()
    async with app:
        with pytest.raises(InvalidInput, match=rf"{option.what}.*not {seconds!r}"):
            await option.apply(app, timedelta(seconds=seconds))


def test_a_timedelta_comes_back_as_its_total_seconds() -> None:
    """Days, seconds and microseconds all count: 1 day 2 min 0.5 s is 86,520.5 s."""
    given = timedelta(days=1, minutes=2, milliseconds=500)
    assert 86_520.5 == check_duration(given, "x", high=10**6)


async def test_a_timedelta_given_to_submit_and_the_task_is_what_the_task_keeps() -> None:
    """``delay``, ``timeout``, ``ttl`` and ``retention`` given as ``timedelta`` to
    ``app.task`` and ``submit`` MUST mean the same as their seconds."""
    app = make_app()

    @app.task(timeout=timedelta(minutes=2), ttl=timedelta(hours=1))
    async def job(ctx: Any) -> None:
        """The task."""

    async with app:
        submitted = await app.submit(job, None, ALICE, delay=timedelta(minutes=5),
                                     retention=timedelta(days=2))
    task = submitted.snapshot
    assert TaskStatus.SCHEDULED == task.status
    assert task.run_at is not None
    assert task.expires_at is not None
    assert (timedelta(minutes=5), timedelta(hours=1)) == (
        task.run_at - task.created_at, task.expires_at - task.run_at)
    assert (120.0, 2 * 86_400.0) == (task.work.timeout_s, task.retention_s)


def test_a_timedelta_of_a_worker_a_retry_policy_a_rate_and_a_schedule_is_kept_in_seconds() -> None:
    """``Worker(lease_for=…)``, ``RetryPolicy.exponential(base, cap=…)``,
    ``app.queue(rate=(n, window))`` and ``app.periodic(every=…)`` MUST keep the seconds of
    the ``timedelta`` given."""
    app = make_app()
    app.queue("partner", rate=(100, timedelta(minutes=1)))
    app.periodic(every=timedelta(minutes=5), name="often")(lambda ctx: None)
    worker = Worker(app, lease_for=timedelta(seconds=45), poll_interval=timedelta(seconds=2))
    policy = RetryPolicy.exponential(timedelta(seconds=1), attempts=3, cap=timedelta(minutes=1))
    limits = app.queues["partner"].limits
    assert limits is not None
    assert (timedelta(minutes=1), timedelta(minutes=5)) == (
        limits.window, app.schedules["often"].period)
    assert (45.0, 2.0, 1.0, 60.0) == (
        worker.lease_for, worker.poll_interval, policy.delay_s, policy.cap_s)
