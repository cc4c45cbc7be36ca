"""Both capacity limits are off unless set (``StoreLimits``): a store whose ``tasks``
counter says it holds a million tasks — a week of finished tasks kept for their retention,
more than the old ``max_tasks`` default — still takes new work, and reads no tenant count;
a limit that is set still reads the counter.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tasks_contract_tests._kit import new_task
from tasks_core import CapacityExceeded

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[Any]]
HISTORY = 1_000_000  # the old default of max_tasks


async def _holding(store: Any, tasks: int) -> None:
    await store._counters.update_one({"_id": "tasks"}, {"$set": {"n": tasks}}, upsert=True)


async def test_a_store_holding_a_million_tasks_takes_more_by_default(
    open_store: Opener,
) -> None:
    store = await open_store()
    await _holding(store, HISTORY)
    created = await store.create(new_task())
    assert created == await store.get(created.id, tenant=created.tenant)
    assert HISTORY + 1 == (await store._counters.find_one({"_id": "tasks"}))["n"]


async def test_a_set_max_tasks_still_reads_the_counter(open_store: Opener) -> None:
    store = await open_store(max_tasks=HISTORY)
    await _holding(store, HISTORY)
    with pytest.raises(CapacityExceeded) as caught:
        await store.create(new_task())
    assert "max_tasks" == caught.value.limit
