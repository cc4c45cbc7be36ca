"""The creators' count is kept only while a capacity limit needs it (``_counting``): a
namespace starts uncounted, a store without limits counts nothing there (on PostgreSQL
its one-statement create takes no lock), and the first create of a store with a limit
starts an exact count that every store keeps from then on."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from tasks_core import (
    CapacityExceeded,
    Completed,
    NewTask,
    Owner,
    TaskExists,
    TaskQuery,
    Work,
)
from tasks_store_sql import SQLStore
from tasks_store_sql._schema import COUNTER, UNCOUNTED

pytestmark = pytest.mark.anyio


def _new(task_id: str, tenant: str = "default") -> NewTask:
    return NewTask(id=task_id, tenant=tenant, owner=Owner("alice", tenant=tenant),
                   work=Work(name="job"))


@contextlib.asynccontextmanager
async def _opened(db_url: str, namespace: str, **limits: int) -> AsyncIterator[SQLStore]:
    store = await SQLStore.open(db_url, namespace=namespace, **limits)
    try:
        yield store
    finally:
        await store.aclose()


async def _count_row(store: SQLStore) -> int:
    locks = store.tables.locks
    async with store.engine.connect() as conn:
        return int((await conn.execute(
            sa.select(locks.c.value).where(locks.c.name == COUNTER))).scalar_one())


async def _stored(store: SQLStore) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(
            sa.select(sa.func.count()).select_from(store.tables.tasks))).scalar_one())


async def _finish_and_delete(store: SQLStore) -> None:
    """Claim the next task, complete it and delete it."""
    [held] = await store.claim_next("w1", 30, queues=["default"])
    done = await store.transition(held.snapshot.id, held.snapshot.revision,
                                  Completed(event_id="done"), held.lease)
    await store.delete(done.snapshot.id, expected_revision=done.snapshot.revision)


async def test_a_store_without_limits_counts_nothing_and_one_with_a_limit_starts_the_count(
    db_url: str, fresh_namespace: str
) -> None:
    """A new namespace MUST be uncounted, and stay so under creates (one, grouped, a batch)
    and deletes of stores without limits. A store with ``max_tasks`` opened on it MUST
    count the tasks stored at its first create and hold the limit exactly; from then on
    every store — one without limits too — MUST keep the count, deletes included.

    Troubleshooting: ``_counting.counted_total`` on the SQL path; PostgreSQL's
    ``_driver_total`` and the ``limited`` parameter of ``_create_sql._created``.
    """
    async with _opened(db_url, fresh_namespace) as free:
        assert UNCOUNTED == await _count_row(free)
        await free.create(_new("a"))
        await asyncio.gather(free.create(_new("b")), free.create(_new("c")))
        await free.create_many([_new("d"), _new("e")])
        await _finish_and_delete(free)
        assert (UNCOUNTED, 4) == (await _count_row(free), await _stored(free))

        async with _opened(db_url, fresh_namespace, max_tasks=7) as limited:
            await limited.create(_new("f"))
            assert 5 == await _count_row(free)
            await limited.create_many([_new("g"), _new("h")])
            with pytest.raises(CapacityExceeded, match="max_tasks"):
                await limited.create(_new("i"))
            await free.create(_new("j"))  # past the other store's limit: it sets none
            assert (8, 8) == (await _count_row(free), await _stored(free))
            await _finish_and_delete(free)
            assert (7, 7) == (await _count_row(free), await _stored(free))
            with pytest.raises(CapacityExceeded, match="max_tasks"):
                await limited.create(_new("k"))


async def test_a_tenant_limit_counts_the_tasks_created_while_nothing_was_counted(
    db_url: str, fresh_namespace: str
) -> None:
    """Tasks created while nothing is counted write no tenant bound; a store with
    ``max_active_tasks_per_scope`` MUST still count them: with two of a tenant's tasks
    stored and a limit of three, one more is taken and the next refused — by one create
    and by a batch alike.

    Troubleshooting: a tenant without a stored bound is counted (``_scopes.room_for``);
    no bound may survive from before the namespace became uncounted (migration 0015).
    """
    async with _opened(db_url, fresh_namespace) as free:
        await free.create_many([_new("a", "t"), _new("b", "t")])
        for n in range(3):
            await free.create(_new(f"o{n}", "other"))
    async with _opened(db_url, fresh_namespace, max_active_tasks_per_scope=3) as limited:
        with pytest.raises(CapacityExceeded, match="max_active_tasks_per_scope"):
            await limited.create_many([_new("c", "t"), _new("d", "t")])
        await limited.create(_new("c", "t"))
        with pytest.raises(CapacityExceeded, match="max_active_tasks_per_scope"):
            await limited.create(_new("d", "t"))
        await limited.create(_new("o3", "other2"))


async def test_a_create_without_limits_takes_no_lock_on_the_creators_row(
    db_url: str, fresh_namespace: str
) -> None:
    """On PostgreSQL (asyncpg), a create of a store without limits in an uncounted
    namespace MUST NOT wait for the creators' row — one-statement creates, a create
    decided in a transaction (an instant ``run_at``) and a batch alike: another session
    holding it does not stop them (the fleet's creates do not queue behind one row).
    SQLite and MariaDB creates, and creates in the application's transaction, still take
    the row.

    Troubleshooting: the statements lock the row only when its value is a count
    (``_create_sql._created``, ``CreateStatements.counter``).
    """
    store = await SQLStore.open(db_url, namespace=fresh_namespace)
    try:
        if store.dialect != "postgresql":
            pytest.skip("the lock-free creates are PostgreSQL's, on asyncpg")
        locks = store.tables.locks
        at = await store.now()
        async with store.engine.connect() as blocker:
            await blocker.begin()
            await blocker.execute(
                sa.select(locks.c.value).where(locks.c.name == COUNTER).with_for_update())
            created = await asyncio.wait_for(asyncio.gather(
                *(store.create(_new(f"t{n}")) for n in range(3)),
                store.create(_new("at").model_copy(update={"run_at": at})),
                store.create_many([_new("b1"), _new("b2")]),
            ), 10)
            await blocker.rollback()
        assert ["t0", "t1", "t2", "at", ["b1", "b2"]] == [
            s.id if not isinstance(s, list) else [b.id for b in s] for s in created]
        assert UNCOUNTED == await _count_row(store)
    finally:
        await store.aclose()


async def test_a_count_started_while_other_stores_create_is_exact(
    db_url: str, fresh_namespace: str
) -> None:
    """While stores without limits create tasks as fast as they can (each its own
    connections), the first create of a store with a limit starts the count: once
    every create has ended, the count MUST equal the stored tasks — five namespaces in
    turn. A count that does not wait for the creates in flight (PostgreSQL's
    one-statement create holds no row) misses those that commit after it.

    Troubleshooting: ``_counting.share_lock`` before the count, on PostgreSQL.
    """
    for trial in range(5):
        await _count_during_creates(db_url, f"{fresh_namespace}{trial}")


async def _count_during_creates(db_url: str, namespace: str) -> None:
    """Three stores without limits create (two at a time each, by every path) 30 times,
    a store with a limit then creates one, and they go on 30 times more; then the count
    must be the stored tasks."""
    from tasks_store_sql.plugin import drop_namespace

    await drop_namespace(db_url, namespace)
    stores = [await SQLStore.open(db_url, namespace=namespace) for _ in range(3)]
    limited = await SQLStore.open(db_url, namespace=namespace, max_tasks=10**9)
    ids = itertools.count()
    created = 0
    goal, reached, stop = 30, asyncio.Event(), False

    async def flood(store: SQLStore) -> None:
        nonlocal created
        while not stop:  # one-statement creates, a transaction's (run_at), batches
            n = next(ids)
            if n % 3 == 0:
                await store.create_many([_new(f"f{n}a"), _new(f"f{n}b")])
            else:
                at = await store.now() if n % 3 == 1 else None
                await store.create(_new(f"f{n}").model_copy(update={"run_at": at}))
            created += 1
            if created >= goal:
                reached.set()

    try:
        floods = [asyncio.ensure_future(flood(s)) for s in stores for _ in range(2)]
        await asyncio.wait_for(reached.wait(), 30)
        reached.clear()
        goal = created + 30  # and as many after the count began
        started = asyncio.ensure_future(limited.create(_new("limited")))
        await asyncio.wait_for(reached.wait(), 30)
        stop = True
        await asyncio.gather(started, *floods)
        assert await _count_row(limited) == await _stored(limited), namespace
    finally:
        for store in (*stores, limited):
            await store.aclose()
        await drop_namespace(db_url, namespace)


async def test_an_id_taken_since_it_was_read_is_refused_as_taken_on_every_path(
    db_url: str, fresh_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL's creates of an uncounted namespace hold no creators' row, so one may
    take an id between another create's read of it and its insert. That create MUST be
    refused with ``TaskExists`` (the task that took it), nothing of it written — one
    create or a batch, in the application's transaction (which stays usable) or the
    store's own — never a driver's unique violation (``StoreError``) or a part of a batch.

    Troubleshooting: ``BulkCreates._insert_new`` (a savepoint, ``ON CONFLICT DO
    NOTHING``) and PostgreSQL's ``_insert_many``.
    """
    store = await SQLStore.open(db_url, namespace=fresh_namespace)
    other = await SQLStore.open(db_url, namespace=fresh_namespace)
    try:
        if store.dialect != "postgresql":
            pytest.skip("only PostgreSQL has creates that hold no creators' row")
        taking = {"x1", "x2", "x3"}

        def racing(read: Any, ids_of: Any) -> Any:
            """``read``, after which another store takes the ids it read as free."""
            async def read_then_race(*args: Any, **kwargs: Any) -> Any:
                found = await read(*args, **kwargs)
                for task_id in sorted(taking & set(ids_of(*args))):
                    taking.discard(task_id)
                    await other.create(_new(task_id))
                return found

            return read_then_race

        monkeypatch.setattr(store, "_fetch", racing(store._fetch, lambda conn, i, **_: [i]))
        batch_ids = lambda conn, batch, *_: [new.id for new in batch]  # noqa: E731
        monkeypatch.setattr(store, "_rows_of", racing(store._rows_of, batch_ids))
        monkeypatch.setattr(store, "_refuse_taken", racing(store._refuse_taken, batch_ids))
        async with store.engine.begin() as conn:
            with pytest.raises(TaskExists) as one:
                await store.create(_new("x1"), transaction=conn)
            with pytest.raises(TaskExists) as batch:
                await store.create_many([_new("b1"), _new("x2")], transaction=conn)
            assert 1 == (await conn.execute(sa.select(1))).scalar_one()  # still usable
        with pytest.raises(TaskExists) as own:
            await store.create_many([_new("b2"), _new("x3")])
        assert ["x1", "x2", "x3"] == [e.value.current.id for e in (one, batch, own)]
        assert ["x1", "x2", "x3"] == sorted(s.id for s in await store.list(
            TaskQuery(tenant="default", principal=Owner("alice"))))
    finally:
        await other.aclose()
        await store.aclose()
