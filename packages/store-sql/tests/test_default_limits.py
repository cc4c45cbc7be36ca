"""Both capacity limits are off unless set (``StoreLimits``): a store that holds more tasks
than the old ``max_tasks`` default — a week of finished tasks kept for their retention —
still takes new work, while a limit that is set is still read from the creators' count.

The count of stored tasks is the creators' row (``task_locks``, ``COUNTER``): these tests
set it as a store holding a million tasks would have it, on every path (the one-statement
create and the transaction on PostgreSQL, the transaction elsewhere).
"""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from tasks_core import CapacityExceeded, NewTask, Owner, Work
from tasks_store_sql import SQLStore
from tasks_store_sql._schema import COUNTER

pytestmark = pytest.mark.anyio

HISTORY = 1_000_000  # the old default of max_tasks


def _new(task_id: str) -> NewTask:
    return NewTask(id=task_id, tenant="a", owner=Owner("alice", tenant="a"),
                   work=Work(name="job"))


async def _holding(store: SQLStore, tasks: int) -> None:
    """Set the creators' count as a store holding ``tasks`` tasks has it."""
    locks = store.tables.locks
    async with store.engine.begin() as conn:
        await conn.execute(sa.update(locks).where(locks.c.name == COUNTER).values(value=tasks))


async def test_a_store_holding_a_million_tasks_takes_more_by_default(
    db_url: str, fresh_namespace: str
) -> None:
    store = await SQLStore.open(db_url, namespace=fresh_namespace)
    try:
        await _holding(store, HISTORY)
        one = await store.create(_new("one"))
        together = await asyncio.gather(*(store.create(_new(f"g{n}")) for n in range(8)))
        assert ["g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"] == [s.id for s in together]
        assert one == await store.get("one", tenant="a")
    finally:
        await store.aclose()


async def test_a_set_max_tasks_still_reads_the_count(
    db_url: str, fresh_namespace: str
) -> None:
    store = await SQLStore.open(db_url, namespace=fresh_namespace, max_tasks=HISTORY)
    try:
        await _holding(store, HISTORY)
        refused = await asyncio.gather(store.create(_new("one")),
                                       *(store.create(_new(f"g{n}")) for n in range(8)),
                                       return_exceptions=True)
        assert {"max_tasks"} == {e.limit for e in refused if isinstance(e, CapacityExceeded)}
        assert 9 == len(refused)
    finally:
        await store.aclose()
