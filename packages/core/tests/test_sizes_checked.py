"""Sizes and option types checked where they are given: every count through
``rules.check_limit`` (an ``int``, not a bool, in its range), every wrong-typed option a
named refusal at once — never accepted to fail later, or to stall a queue."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest
from tasks_core import App, InvalidInput, Limits, Queue, RetryPolicy, System, TaskContext
from tasks_core.durations import check_duration
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio

BAD_COUNTS = [0, -1, math.nan, "5", 2.5, True, Decimal(2), 10**400]


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
