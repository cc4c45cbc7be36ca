"""``SQLiteStore``: a SQLite file's store creates a fresh task in one transaction on its
writer connection, and leaves every other case — a taken id, a limit to decide, a
replacement — to ``SQLStore``'s create, which refuses exactly as before."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from tasks_core import (
    CapacityExceeded,
    Completed,
    NewTask,
    Owner,
    StoreUnavailable,
    TaskExists,
    TaskNotFound,
    TaskQuery,
    Work,
)
from tasks_store_sql import PostgresStore, SQLiteStore, SQLStore
from tasks_store_sql._schema import COUNTER, UNCOUNTED

pytestmark = pytest.mark.anyio

ALICE = Owner("alice")


def _new(task_id: str, owner: Owner = ALICE) -> NewTask:
    return NewTask(id=task_id, tenant=owner.tenant, owner=owner, work=Work(name="job"))


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tasks.db'}"


@pytest.fixture
async def store(url: str) -> AsyncIterator[SQLStore]:
    opened = await SQLStore.open(url)
    yield opened
    await opened.aclose()


class _Statements:
    """The statements the store's engine (not its writer connection) ran."""

    def __init__(self, store: SQLStore) -> None:
        self.seen: list[str] = []
        sa.event.listen(store._db.engine.sync_engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.seen.append(statement)


async def _counter(store: SQLStore) -> int:
    locks = store.tables.locks
    async with store._db.engine.connect() as conn:
        value = (await conn.execute(
            sa.select(locks.c.value).where(locks.c.name == COUNTER))).scalar_one()
    return int(value)


def test_a_sqlite_file_url_gives_the_sqlite_store(tmp_path: Path) -> None:
    assert type(SQLStore(f"sqlite:///{tmp_path / 'a.db'}")) is SQLiteStore
    assert type(SQLStore("sqlite://")) is SQLStore  # in memory: one shared connection
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'b.db'}")
    assert type(SQLStore(engine=engine)) is SQLStore  # the application's engine
    assert type(SQLStore("postgresql://u@127.0.0.1:1/db")) is PostgresStore


async def test_a_fresh_task_is_created_without_a_statement_of_the_engine(
    store: SQLStore,
) -> None:
    statements = _Statements(store)
    created = await store.create(_new("t1"))

    assert statements.seen == []
    assert await store.get("t1", tenant="default") == created
    assert [s.id for s in await store.list(TaskQuery(tenant="default", principal=ALICE))] \
        == ["t1"]
    assert await _counter(store) == UNCOUNTED  # no limit: nothing counted


async def test_a_taken_id_is_refused_by_the_sql_path_and_writes_nothing(
    store: SQLStore,
) -> None:
    first = await store.create(_new("t1"))
    statements = _Statements(store)

    with pytest.raises(TaskExists) as refused:
        await store.create(_new("t1", Owner("bob")))

    assert refused.value.current == first
    assert statements.seen != []  # decided by SQLStore's create
    assert await _counter(store) == UNCOUNTED
    assert await store.list(TaskQuery(tenant="default", principal=Owner("bob"))) == []


async def test_max_tasks_holds_at_exactly_the_limit_and_one_past(url: str) -> None:
    store = await SQLStore.open(url, max_tasks=2)
    try:
        await store.create(_new("t1"))
        await store.create(_new("t2"))
        with pytest.raises(CapacityExceeded):
            await store.create(_new("t3"))
        assert await _counter(store) == 2
        with pytest.raises(TaskNotFound):
            await store.get("t3", tenant="default")
    finally:
        await store.aclose()


async def test_a_create_raises_a_stored_bound_of_its_tenant(url: str) -> None:
    """A store without ``max_active_tasks_per_scope`` still raises the bound another
    store with the limit stored; a bound left low would let that store pass its limit
    without counting."""
    limited = await SQLStore.open(url, max_active_tasks_per_scope=3)
    unlimited = await SQLStore.open(url)
    try:
        for task_id in ("t1", "t2", "t3"):
            await limited.create(_new(task_id))
        for task_id in ("t1", "t2"):
            claimed = await limited.claim(task_id, "w1", 30)
            await limited.transition(task_id, claimed.snapshot.revision,
                                     Completed(event_id="done"), claimed.lease)
        await limited.create(_new("t4"))  # counts: t3 active, stores the bound 2
        await unlimited.create(_new("t5"))
        await unlimited.create(_new("t6"))  # t3, t4, t5, t6 active: the limit passed

        with pytest.raises(CapacityExceeded):
            await limited.create(_new("t7"))
    finally:
        await unlimited.aclose()
        await limited.aclose()


async def test_a_create_while_another_connection_writes_waits_then_gives_up(
    url: str, tmp_path: Path
) -> None:
    store = await SQLStore.open(url, busy_timeout=0.2)
    holder = sqlite3.connect(tmp_path / "tasks.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable):
            await store.create(_new("t1"))
        holder.execute("ROLLBACK")

        await store.create(_new("t2"))
        assert [s.id for s in await store.list(TaskQuery(tenant=None))] == ["t2"]
    finally:
        holder.close()
        await store.aclose()
