"""Sizes and option types checked where they are given: every count through
``rules.check_limit`` (any integer, not a bool, in its range, kept as a plain ``int``), every
wrong-typed option a named refusal at once — never accepted to fail later, or to stall a
queue."""

from __future__ import annotations

import enum
import logging
import math
import re
from decimal import Decimal
from typing import Any

import pytest
from _runtime_kit import ALICE, Count, fast_worker, make_app
from tasks_core import (
    App,
    InvalidInput,
    Limits,
    Queue,
    RetryPolicy,
    SubmitItem,
    System,
    TaskContext,
    TaskQuery,
)
from tasks_core.durations import check_duration
from tasks_core.sizes import check_attempts, check_deliveries
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio

BAD_COUNTS = [0, -1, math.nan, "5", 2.5, True, Decimal(2), 10**400]


class IntEnumSeven(enum.IntEnum):
    """An integer that is not an ``int`` by type."""

    SEVEN = 7


@pytest.mark.parametrize("count", BAD_COUNTS, ids=repr)
def test_a_queue_concurrency_that_is_not_a_count_is_refused(count: Any) -> None:
    """``Worker(queue_concurrency={q: n})`` MUST take only an ``int`` in 1..MAX_RUNNING
    (0 left the queue never served; a string crashed the worker later)."""
    app = App("memory://", queues=["q"])
    with pytest.raises(InvalidInput, match=r"queue_concurrency\['q'\] must be an integer"):
        app.worker(queue_concurrency={"q": count})


def test_queue_concurrency_is_a_mapping_of_declared_queues() -> None:
    """A non-mapping, or a queue the app does not declare (a typo), MUST be refused; a
    declared queue this worker does not serve is left unused."""
    app = App("memory://", queues=["q", "r"])
    with pytest.raises(InvalidInput, match="must be a dict"):
        app.worker(queue_concurrency=5)
    with pytest.raises(InvalidInput, match=r"undeclared queue.*'qq'"):
        app.worker(queue_concurrency={"qq": 2})
    worker = app.worker(queues=["q"], queue_concurrency={"q": 3, "r": 2})
    assert {"q": 3} == worker.limits


@pytest.mark.parametrize(("option", "value"), [
    ("limits", 5), ("limits", {"max_tasks": 5}), ("policy", "strict"), ("store_options", 5),
])
def test_an_app_option_of_the_wrong_type_is_refused_at_once(option: str, value: Any) -> None:
    """``App(limits=…, policy=…, store_options=…)`` of the wrong type MUST be a
    ``TypeError`` at construction, not an ``AttributeError`` when the store opens."""
    with pytest.raises(TypeError, match=f"{option}="):
        App("memory://", **{option: value})


@pytest.mark.parametrize("value", [True, "5", Decimal(5), 2.0, 0])
def test_a_store_limit_is_an_int(value: Any) -> None:
    """A store's ``max_tasks`` MUST be an ``int`` (``True`` read as 1, ``"5"`` as 5)."""
    with pytest.raises(InvalidInput, match="max_tasks"):
        MemoryStore(max_tasks=value)
    assert 5 == MemoryStore(max_tasks=5).limits.max_tasks


@pytest.mark.parametrize(("check", "what", "most"), [
    (check_attempts, "attempts", 10_000), (check_deliveries, "max_deliveries", 100_000),
], ids=["attempts", "max_deliveries"])
def test_attempts_and_max_deliveries_are_counts_in_their_documented_ranges(
    check: Any, what: str, most: int
) -> None:
    """``attempts`` (1..10,000) and ``max_deliveries`` (1..100,000) MUST take every integer
    in range, kept as a plain ``int``, and refuse anything else naming the option, its
    range and the value — as every count does."""
    assert [1, 7, most] == [check(1), check(IntEnumSeven.SEVEN), check(most)]
    assert int is type(check(IntEnumSeven.SEVEN))
    for bad, shown in ((0, "0"), (most + 1, str(most + 1)), (True, "a bool"), ("5", "'5'"),
                       (2.5, "the float 2.5")):
        with pytest.raises(InvalidInput, match=rf"^{what} must be an integer in "
                                               rf"1\.\.{most}, not {re.escape(shown)}$"):
            check(bad)


@pytest.mark.parametrize("name", ["concurrency", "max_input_bytes", "max_result_bytes",
                                  "max_runs_per_owner", "max_tasks"])
@pytest.mark.parametrize("value", [0, True, "5", 2.5, 10**400])
def test_every_size_of_limits_is_a_count_in_range(name: str, value: Any) -> None:
    """Every size of ``Limits`` MUST be checked by ``check_limit``, bounded above."""
    with pytest.raises(InvalidInput, match=name):
        Limits(**{name: value})


def test_limits_concurrency_is_bounded_as_a_worker_is() -> None:
    """``Limits(concurrency=…)`` MUST be refused where a worker's would be."""
    with pytest.raises(InvalidInput, match=r"1\.\.1000000"):
        Limits(concurrency=2_000_000)


@pytest.mark.parametrize("value", [True, 1.0, Decimal(1)])
def test_an_exclusive_queue_takes_max_running_1_as_an_int_only(value: Any) -> None:
    """``exclusive=True`` with ``max_running`` other than the integer 1 MUST be refused."""
    with pytest.raises(InvalidInput, match="max_running must be an integer"):
        Queue("q", exclusive=True, max_running=value)
    assert 1 == Queue("q", exclusive=True, max_running=1).max_running


def test_queue_concurrency_is_bounded() -> None:
    """A queue's ``concurrency`` MUST be a count a worker can run."""
    with pytest.raises(InvalidInput, match=r"queue concurrency must be an integer in 1\.\."):
        Queue("q", concurrency=10**400)


@pytest.mark.parametrize("retry", [0, False, "", -0.0])
async def test_a_falsy_retry_is_refused_not_read_as_the_default(retry: Any) -> None:
    """``retry=0`` (or another non-policy) MUST be refused at registration and at submit;
    it read as "the default policy" through an ``or``."""
    app = App("memory://")
    with pytest.raises(InvalidInput, match="retry"):
        app.task(retry=retry)(_noop)
    app.task(name="noop")(_noop)
    async with app:
        with pytest.raises(InvalidInput, match="retry"):
            await app.submit("noop", None, System(), retry=retry)
        assert [] == (await app.list(System())).items


def test_a_negative_zero_duration_is_zero() -> None:
    """``-0.0`` seconds MUST come back as ``0.0`` (it was stored and printed as ``-0s``)."""
    seconds = check_duration(-0.0, "x", high=1, allow_zero=True)
    assert "0.0" == repr(seconds)
    assert "0.0" == repr(RetryPolicy.fixed(-0.0, attempts=3).delay_s)


async def _noop(ctx: TaskContext) -> None:
    """A handler."""


HUGE = 10**5000
"""An integer past Python's digit limit: its ``repr`` raises ``ValueError``."""


def test_every_count_of_the_api_is_kept_as_a_plain_int() -> None:
    """A NumPy-like integer (``numbers.Integral``, not ``int``) MUST be taken wherever a
    count is, and kept as a plain ``int`` — never handed on to a store as it was given."""
    limits = Limits(max_tasks=Count(1000), concurrency=Count(4), max_input_bytes=Count(4096))
    assert (1000, 4, 4096) == (limits.max_tasks, limits.concurrency, limits.max_input_bytes)
    assert {int} == {type(limits.max_tasks), type(limits.concurrency),
                     type(limits.max_input_bytes)}
    queue = Queue("q", concurrency=Count(2), max_running=Count(3))
    assert [(2, int), (3, int)] == [(queue.concurrency, type(queue.concurrency)),
                                    (queue.max_running, type(queue.max_running))]
    policy = RetryPolicy.fixed(1.0, attempts=Count(3))
    assert (3, int) == (policy.attempts, type(policy.attempts))

    app = make_app()

    @app.task(priority=Count(5), max_deliveries=Count(7))
    async def job(ctx: TaskContext) -> None:
        return None

    assert [(5, int), (7, int)] == [(job.priority, type(job.priority)),
                                    (job.max_deliveries, type(job.max_deliveries))]


async def test_a_count_given_per_submit_is_stored_as_a_plain_int() -> None:
    """``priority=`` and ``max_deliveries=`` of ``submit`` and ``submit_many`` MUST take
    any integer and store it as a plain ``int``."""
    app = make_app()

    @app.task
    async def job(ctx: TaskContext) -> None:
        return None

    async with app:
        one = await app.submit(job, None, ALICE, priority=Count(9), max_deliveries=Count(4))
        [many] = await app.submit_many([SubmitItem(job, priority=Count(-9))], ALICE)
        first, second = (await app.get(one.id, ALICE), await app.get(many.id, ALICE))
    assert [(9, int), (4, int), (-9, int)] == [
        (first.priority, type(first.priority)),
        (first.work.max_deliveries, type(first.work.max_deliveries)),
        (second.priority, type(second.priority))]


async def test_an_integer_too_long_to_print_is_refused_by_name() -> None:
    """A priority past Python's digit limit MUST be ``InvalidInput`` naming the option
    (``submit``; ``submit_many`` with the item's index; ``@app.task``), nothing written —
    not the ``ValueError`` its ``repr`` raises."""
    app = make_app()

    @app.task
    async def job(ctx: TaskContext) -> None:
        return None

    message = "priority must be an integer in -100..100, not an integer too long to print"
    with pytest.raises(InvalidInput, match=f"^{message}$"):
        app.task(name="other", priority=HUGE)(job.fn)
    async with app:
        with pytest.raises(InvalidInput, match=f"^{message}$"):
            await app.submit(job, None, ALICE, priority=HUGE)
        with pytest.raises(InvalidInput, match=f"^item 1: {message}$"):
            await app.submit_many([SubmitItem(job), SubmitItem(job, priority=HUGE)], ALICE)
        store = await app.open()
        assert [] == await store.list(TaskQuery(tenant=None))


@pytest.mark.parametrize("queues", ["emails", b"emails", {"emails": {"max_running": 5}}, 5,
                                    None])
def test_queues_of_the_wrong_kind_are_refused(queues: Any) -> None:
    """``App(queues=…)`` MUST be a list of names or ``Queue``: a string (never one queue
    per letter), a mapping (never its keys with the options dropped) or a non-list is
    ``InvalidInput``; so is a worker's."""
    with pytest.raises(InvalidInput, match=r"^queues must be a list of queue names or Queue"):
        App("memory://", queues=queues)
    if queues is not None:
        with pytest.raises(InvalidInput, match=r"^queues must be a non-empty list of queue "):
            make_app().worker(queues=queues)


@pytest.mark.parametrize("worker_id", [5, "", "x" * 257, b"w"])
def test_a_bad_worker_id_is_refused_before_the_worker_starts(
    worker_id: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker id that every store would refuse MUST be ``InvalidInput`` when the worker
    is made (never a worker that starts and fails every claim); ``None`` is the default."""
    app = make_app()
    with pytest.raises(InvalidInput, match=r"^worker_id must be a non-empty string of at "
                                           r"most 256 characters$"):
        fast_worker(app, worker_id=worker_id)
    assert fast_worker(app).worker_id
    assert "w" * 256 == fast_worker(app, worker_id="w" * 256).worker_id
    assert [] == [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_an_empty_task_name_is_refused_not_defaulted() -> None:
    """``@app.task(name="")`` MUST be refused, not read as "the function's name"."""
    app = make_app()

    async def job(ctx: TaskContext) -> None:
        return None

    with pytest.raises(InvalidInput, match=r"name"):
        app.task(name="")(job)
    assert "job" not in app.tasks


@pytest.mark.parametrize("name", [" ", "job ", " job", "\tjob"])
async def test_a_task_name_blank_or_padded_with_whitespace_is_refused(name: str) -> None:
    """A task name MUST NOT be blank nor begin or end with whitespace — at registration
    and when a task is submitted by name (the CLI without ``--app``) — refused before
    anything is written: such a name reads as another one, and no worker would serve it."""
    app = make_app()

    async def job(ctx: TaskContext) -> None:
        return None

    with pytest.raises(InvalidInput, match=r"^task name must not be blank nor begin or end "):
        app.task(name=name)(job)
    async with app:
        with pytest.raises(InvalidInput, match=r"^task name must not be blank nor begin "):
            await app.submit(name, None, ALICE)
        assert [] == (await app.list(ALICE)).items
