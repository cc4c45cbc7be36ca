"""PostgreSQL plans of the hot path: a transition (and a completion statement) reads its
own task's history by key.

asyncpg prepares each hot-path statement once per connection, and after a few runs
PostgreSQL may keep one generic plan for it — made with the statistics of that moment,
typically a new, empty namespace. The history lookup of a transition (its replay check)
must then still go through the events' primary key: a plan that scans the events table
costs a read of every task's history per transition, and a worker slows down as history
grows (that was the plan a join of the lookup gave, found by ``nox -s bench``).

The test forces the generic plan while the events table is tiny and never analyzed, runs
the lock statement on its own connection, and reads the table's scan counters of that
transaction (``pg_stat_xact_user_tables``): no sequential scan of the events table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from tasks_core import Completed, Failed, NewTask, Owner, Work
from tasks_store_sql import PostgresStore, SQLStore
from tasks_store_sql._url import parse_url
from tasks_store_sql.plugin import drop_namespace
from tasks_store_sql.postgres import _complete_sql as _pg_complete

pytestmark = pytest.mark.anyio

NAMESPACE = "plans"
OWNER = Owner("alice")


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[SQLStore]:
    """A store on a namespace created for the test (empty tables, never analyzed)."""
    await drop_namespace(postgres_url, NAMESPACE)
    opened = await SQLStore.open(postgres_url, namespace=NAMESPACE)
    try:
        yield opened
    finally:
        await opened.aclose()
        await drop_namespace(postgres_url, NAMESPACE)


async def _tasks_with_history(store: SQLStore) -> None:
    """Three failed tasks ``t0``…``t2``, each with a history entry ``done`` (a
    failure's record is a history row; a completion's is the task's own)."""
    for n in range(3):
        await store.create(NewTask(id=f"t{n}", tenant="default", owner=OWNER,
                                   work=Work(name="job")))
        claim = await store.claim(f"t{n}", "w1", 30)
        await store.transition(f"t{n}", claim.snapshot.revision,
                               Failed(event_id="done", error=f"E{n}"), claim.lease)


async def _run_generic(
    store: SQLStore, postgres_url: str, sql: str, args: list[Any]
) -> list[asyncpg.Record]:
    """Run ``sql`` under the generic plan on a connection of its own; check that its
    transaction read the events table by index only."""
    dsn = parse_url(postgres_url).url.set(drivername="postgresql")
    conn = await asyncpg.connect(dsn.render_as_string(hide_password=False))
    try:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        async with conn.transaction():
            rows = await conn.fetch(sql, *args)
            scans = await conn.fetchrow(
                "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables WHERE relname = $1",
                store.tables.events.name,
            )
    finally:
        await conn.close()
    assert scans is not None
    assert scans["seq_scan"] == 0, "the generic plan scans the events table"
    assert scans["idx_scan"] >= 1
    return list(rows)


async def test_generic_plan_of_a_transition_reads_history_by_key(
    store: SQLStore, postgres_url: str
) -> None:
    await _tasks_with_history(store)
    assert isinstance(store, PostgresStore)
    lock = store.sql.lock

    rows = await _run_generic(store, postgres_url, lock.sql,
                              lock.args(now=None, ids=["t1", "t2"], event_ids=["done"]))

    assert sorted((r["id"], r["event_id"]) for r in rows) == [("t1", "done"), ("t2", "done")]


async def test_generic_plan_of_a_completion_reads_history_by_key(
    store: SQLStore, postgres_url: str
) -> None:
    """The completion statement's replay check, under the generic plan made while the
    events table is tiny, reads the history by key as well."""
    await _tasks_with_history(store)
    await store.create(NewTask(id="t3", tenant="default", owner=OWNER, work=Work(name="job")))
    [claim] = await store.claim_next("w1", 30, queues=["default"], limit=1)
    assert isinstance(store, PostgresStore)
    planned = _pg_complete.plan(
        [("t3", claim.snapshot.revision, Completed(event_id="done"), claim.lease)],
        store.decoded,
    )
    assert list(planned.kept) == ["t3"]
    statement = store.complete

    rows = await _run_generic(store, postgres_url, statement.sql,
                              statement.args(now=None, **planned.parameters()))

    assert [r["id"] for r in rows] == ["t3"]
