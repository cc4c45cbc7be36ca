"""Counts and status listings on their indexes (migration 0009), and
listings by principal on the members' primary key.

``counts`` reads the counts index ``(tenant, queue, status)`` and, for the rows that may
read otherwise, the expiry, lease and waiting indexes; a listing of tasks waiting for
input, failed or cancelled reads the status index ``(status, id)`` in id order. The plans
are asked as in ``test_index_plans.py`` (sequential scans discouraged; PostgreSQL's
generic plan). Migration 0009 goes up, down and up again with tasks of every status in
the namespace, their counts and listings unchanged. (SQLite reads the scheduled tasks
through the claim index, every unleased pending task: the waiting index's first key is
the queue, which a count does not name.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import Opener
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import DDLCompiler
from sqlalchemy.sql.ddl import ExecutableDDLElement
from tasks_contract_tests._kit import (
    ALICE,
    LEASE_S,
    created_and_claimed,
    finished_task,
    new_task,
)
from tasks_core import InputRequested, ManualClock, TaskQuery, TaskStatus
from tasks_store_sql import SQLStore, head, migrate
from test_index_plans import _assert_uses, _reading, captured

pytestmark = pytest.mark.anyio

INDEXES = ("ix_tasks_counts", "ix_tasks_status")


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest) -> Opener:
    found: Opener = request.getfixturevalue(f"{request.param}_opener")
    return found


async def _every_status(store: SQLStore, clock: ManualClock) -> None:
    """Tasks pending, scheduled, running, waiting, completed, failed, cancelled; an
    expired one."""
    await store.create(new_task(ttl_s=1))
    clock.advance(2)
    await store.create(new_task())
    await store.create(new_task(delay_s=60, queue="mail"))
    await created_and_claimed(store)
    waiting, lease = await created_and_claimed(store, queue="mail")
    await store.transition(waiting.id, 0, InputRequested(event_id="q", key="k"), lease)
    for end in ("completed", "failed", "cancelled"):
        await finished_task(store, end)


async def _vacuumed(store: SQLStore) -> None:
    """PostgreSQL: the table vacuumed, as autovacuum keeps it (an index-only scan reads
    the heap of pages not marked all-visible, and on a table never vacuumed, every page)."""
    if store.engine.dialect.name == "postgresql":
        async with store.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(Vacuum(store.tables.tasks))


class Vacuum(ExecutableDDLElement):
    """``VACUUM <table>``, the name quoted by the dialect."""

    def __init__(self, table: sa.Table) -> None:
        self.table = table


@compiles(Vacuum)
def _vacuum(element: Vacuum, compiler: DDLCompiler, **_: Any) -> str:
    return "VACUUM " + compiler.preparer.format_table(element.table)


async def test_counts_read_the_counts_index_and_the_exceptions_by_theirs(
    opener: Opener, closing: Callable[[SQLStore], SQLStore]
) -> None:
    clock = ManualClock()
    store = closing(await opener(clock=clock))
    await _every_status(store, clock)
    with captured(store) as sent:
        counts = await store.counts(tenant="default")
    assert 7 == sum(counts.values())
    await _vacuumed(store)
    indexes = ["ix_tasks_counts", "ix_tasks_expires", "ix_tasks_lease", "ix_tasks_waiting"]
    if store.engine.dialect.name == "sqlite":  # matches no key of the waiting index
        indexes[-1] = "ix_tasks_claim"  # and reads the unleased pending tasks' index
    await _assert_uses(store, indexes, _reading(sent, store, "count("))


async def test_listings_of_finished_and_waiting_statuses_read_the_status_index(
    opener: Opener, closing: Callable[[SQLStore], SQLStore]
) -> None:
    clock = ManualClock()
    store = closing(await opener(clock=clock))
    await _every_status(store, clock)
    for status in (TaskStatus.CANCELLED, TaskStatus.FAILED, TaskStatus.WAITING_INPUT):
        with captured(store) as sent:
            [listed] = await store.list(TaskQuery(tenant=None, statuses=frozenset({status})))
        assert status == listed.status
        await _assert_uses(store, "ix_tasks_status", _reading(sent, store, "status IN ("))


async def test_a_listing_by_principal_reads_the_owner_index_and_the_members(
    sqlite_opener: Opener, closing: Callable[[SQLStore], SQLStore]
) -> None:
    """SQLite: the owner index for the tasks the principal owns, the members' primary key
    for those it watches, each in task id order. (PostgreSQL picks by the tables' size:
    on a few rows other indexes — seen in the dashboard bench, not asserted here.)"""
    clock = ManualClock()
    store = closing(await sqlite_opener(clock=clock))
    await _every_status(store, clock)
    await _vacuumed(store)
    with captured(store) as sent:
        listed = await store.list(TaskQuery(tenant="default", principal=ALICE, limit=3))
    assert 3 == len(listed)
    indexes = ["ix_tasks_owner", "sqlite_autoindex_task_members_1"]
    joined = [(sql, what) for sql, what in sent
              if sql.lstrip().upper().startswith("SELECT") and "task_members JOIN" in sql]
    assert joined, "no listing joined from the members"
    await _assert_uses(store, indexes, joined)


async def _indexes(store: SQLStore) -> set[str]:
    async with store.engine.connect() as conn:
        names = await conn.run_sync(
            lambda sync: {i["name"] for i in sa.inspect(sync).get_indexes(store.tables.tasks.name)})
    return {name.removeprefix(store.tables.prefix) for name in names if name}


async def _read(store: SQLStore) -> tuple[object, ...]:
    listings = [[s.id for s in await store.list(TaskQuery(tenant=None,
                                                           statuses=frozenset({status})))]
                for status in TaskStatus]
    return await store.counts(tenant=None), listings


async def test_migration_0009_goes_up_down_and_up_with_tasks_in_it(
    db_url: str, fresh_namespace: str
) -> None:
    """Both indexes come with 0009 and go with its downgrade; the tasks stay, and the
    counts and listings by status read the same before and after."""
    clock = ManualClock()
    await migrate(db_url, namespace=fresh_namespace)
    store = await SQLStore.open(db_url, namespace=fresh_namespace, clock=clock)
    try:
        await _every_status(store, clock)
        before = await _read(store)
        assert set(INDEXES) <= await _indexes(store)
        assert head() == await migrate(db_url, namespace=fresh_namespace, to="0008")
        assert set() == set(INDEXES) & await _indexes(store)
        t = store.tables.tasks  # (the store's code reads columns 0008 has not)
        async with store.engine.connect() as conn:  # every row stays, the expired one too
            assert 8 == (await conn.execute(sa.select(sa.func.count()).select_from(t))).scalar()
        await migrate(db_url, namespace=fresh_namespace)
        assert set(INDEXES) <= await _indexes(store)
        assert before == await _read(store)
        clock.advance(LEASE_S)
        assert (await store.counts(tenant=None)).get(("default", TaskStatus.PENDING)) == 2
    finally:
        await store.aclose()
