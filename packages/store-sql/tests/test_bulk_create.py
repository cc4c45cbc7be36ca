"""``create_many`` on each database: the rows hold exactly the snapshots returned (text,
columns, members), the creators' count and the tenants' bounds take the whole batch, and
on PostgreSQL with asyncpg a batch of 1,000 tasks costs a few statements, not 1,000.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import Opener
from tasks_contract_tests._kit import new_task
from tasks_core import CapacityExceeded, ManualClock, Owner, Snapshot, TaskQuery, rules
from tasks_store_sql import SQLStore, _codec
from tasks_store_sql._stored import encode_body

pytestmark = pytest.mark.anyio

START = datetime(2030, 1, 1, 12, 0, 0, 125000, tzinfo=UTC)
BOB = Owner("bob")


async def _stored_as_returned(store: SQLStore, created: Snapshot) -> None:
    """The row of ``created`` holds exactly it: the codec's body and its columns (every
    one of its projection)."""
    t = store.tables.tasks
    projected = _codec.projection(created, None)
    async with store.engine.connect() as conn:
        row = (await conn.execute(
            sa.select(*(t.c[name] for name in projected), t.c.row_version)
            .where(t.c.id == created.id))).one()
    assert row.snapshot == encode_body(created)
    assert (row.created_at, row.expires_at, row.run_at, row.available_at) == (
        created.created_at, created.expires_at, created.run_at, rules.available_at(created))
    assert {name: row._mapping[t.c[name]] for name in projected} == projected
    assert row.row_version == 0


async def test_a_batch_is_stored_as_returned_and_counted_whole(
    any_opener: Opener, closing: Callable[[SQLStore], SQLStore]
) -> None:
    store = closing(await any_opener(clock=ManualClock(START), max_tasks=6))
    news = [new_task(), new_task(ttl_s=90.5, delay_s=30, priority=7),
            new_task(watchers=(BOB,), input={"n": 1}), new_task(owner=None, queue="mail")]
    created = await store.create_many(news)

    assert [n.id for n in news] == [s.id for s in created]
    for snapshot in created:
        await _stored_as_returned(store, snapshot)
        assert rules.present(snapshot, START) == await store.get(snapshot.id, tenant=None)
    watched = await store.list(TaskQuery(tenant="default", principal=BOB))
    assert [created[2].id] == [s.id for s in watched]
    with pytest.raises(CapacityExceeded):  # 4 counted: 3 more pass max_tasks=6
        await store.create_many([new_task() for _ in range(3)])
    assert 2 == len(await store.create_many([new_task(), new_task()]))


async def test_a_tenant_bound_takes_the_whole_batch(
    any_opener: Opener, closing: Callable[[SQLStore], SQLStore]
) -> None:
    """Past the stored tasks the bound is read (or counted) and raised by the batch."""
    store = closing(await any_opener(max_active_tasks_per_scope=4))
    await store.create_many([new_task(), new_task(), new_task(owner=Owner("m", tenant="x"))])
    with pytest.raises(CapacityExceeded):
        await store.create_many([new_task(), new_task(), new_task()])
    await store.create_many([new_task(), new_task()])
    with pytest.raises(CapacityExceeded):
        await store.create_many([new_task()])


class _Counting:
    """A driver connection that counts the statements run on it."""

    def __init__(self, driver: Any, counted: list[str]) -> None:
        self._driver, self._counted = driver, counted

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._driver, name)
        if name in ("execute", "fetch", "fetchrow", "fetchval"):
            def counting(sql: str, *args: Any) -> Any:
                self._counted.append(sql)
                return attribute(sql, *args)
            return counting
        return attribute


async def test_a_thousand_tasks_on_asyncpg_are_a_few_statements(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = closing(await postgres_opener(max_tasks=5000, max_active_tasks_per_scope=5000))
    await store.create(new_task())  # (the first create with a limit starts the count)
    counted: list[str] = []
    run_driver = store._db.run_driver

    async def counting(operation: Any, **options: Any) -> Any:
        return await run_driver(lambda driver: operation(_Counting(driver, counted)),
                                **options)

    monkeypatch.setattr(store._db, "run_driver", counting)
    news = [new_task(owner=BOB if n % 2 else None) for n in range(1000)]
    created = await store.create_many(news)

    assert 4 == len(counted)  # the lock with the clock, the ids, the insert, the bound
    assert 1000 == len(await store.list(TaskQuery(tenant=None, limit=1000)))
    await _stored_as_returned(store, created[999])
