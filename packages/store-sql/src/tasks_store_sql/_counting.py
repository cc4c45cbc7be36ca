"""The creators' count (the ``task_count`` row of ``task_locks``): the number of stored
tasks behind ``max_tasks`` and the tenants' bounds, kept only while a limit needs it.

Rules: the row holds the count, or ``UNCOUNTED`` (``_schema``; a namespace is made
uncounted by migration 0015, and nothing turns counting off again). Uncounted, a create
of a store without a capacity limit counts nothing and writes no bound; a create or a
delete adds to the count only when there is one (:func:`add_to_count`). The first create
of a store with a limit starts the count (:func:`counted_total`) holding the row, while no
other create can be in flight: on SQLite and MariaDB every create holds the row; on
PostgreSQL (asyncpg) an uncounted create holds ``ROW EXCLUSIVE`` on ``tasks`` instead, so
the count first takes ``SHARE`` there, which waits for them (once per namespace).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core.errors import StoreError
from tasks_core.models import StoreLimits

from tasks_store_sql._schema import COUNTER, MISSING_COUNTER, UNCOUNTED, Tables

__all__ = [
    "add_to_count",
    "counted_total",
    "counting_starts",
    "lock_count",
    "row_exclusive_lock",
    "share_lock",
]


async def lock_count(conn: AsyncConnection, tables: Tables, kind: str) -> int:
    """Lock the creators' row (SQLite: its writers are serialized already); its value,
    the count or ``UNCOUNTED``.

    Raises:
        StoreError: the row is missing (a damaged schema, or code on the other side of a
            migration that renamed it).
    """
    locks = tables.locks
    stmt = sa.select(locks.c.value).where(locks.c.name == COUNTER)
    if kind != "sqlite":
        stmt = stmt.with_for_update()
    value = (await conn.execute(stmt)).scalar()
    if value is None:
        raise StoreError(MISSING_COUNTER)
    return int(value)


async def counted_total(
    conn: AsyncConnection, tables: Tables, kind: str, limits: StoreLimits
) -> int | None:
    """The creators' row locked: the stored tasks, or ``None`` while nothing is counted
    and ``limits`` set none (the create then checks no limit and counts nothing). A store
    with a limit that finds no count starts it here (module docstring).

    Raises:
        StoreError: as :func:`lock_count`.
    """
    total = await lock_count(conn, tables, kind)
    if not counting_starts(total, limits):
        return None if total == UNCOUNTED else total
    if kind == "postgresql":
        await conn.execute(share_lock(tables))
    tasks, locks = tables.tasks, tables.locks
    rows = sa.select(tasks.c.id)
    if kind == "mysql":  # a locking read: a plain one at REPEATABLE READ (an application's
        rows = rows.with_for_update(read=True)  # transaction) sees its first read's rows
    count = sa.select(sa.func.count()).select_from(rows.subquery())
    stored = int((await conn.execute(count)).scalar_one())
    await conn.execute(sa.update(locks).where(locks.c.name == COUNTER).values(value=stored))
    return stored


def counting_starts(value: int, limits: StoreLimits) -> bool:
    """Whether a create that read ``value`` in the creators' row starts the count: none is
    kept, and ``limits`` set one."""
    return value == UNCOUNTED and limits.any_set


_SHARE = "LOCK TABLE %(fullname)s IN SHARE MODE"
_ROW_EXCLUSIVE = "LOCK TABLE %(fullname)s IN ROW EXCLUSIVE MODE"


def share_lock(tables: Tables) -> sa.ExecutableDDLElement:
    """PostgreSQL: ``LOCK TABLE`` of ``tasks`` in ``SHARE`` mode, which waits for the
    writes in flight and holds new ones (the name quoted by the dialect)."""
    return sa.DDL(_SHARE).against(tables.tasks)  # type: ignore[no-untyped-call]


def row_exclusive_lock(tables: Tables) -> sa.ExecutableDDLElement:
    """PostgreSQL: ``LOCK TABLE`` of ``tasks`` in ``ROW EXCLUSIVE`` mode, as every write
    takes it: a create that reads the creators' row without locking it takes this first,
    so that a count being started either waits for it or is seen by that read."""
    return sa.DDL(_ROW_EXCLUSIVE).against(tables.tasks)  # type: ignore[no-untyped-call]


def add_to_count(tables: Tables, delta: Any) -> sa.Update:
    """Add ``delta`` (a number or a SQL expression) to the count, if there is one."""
    locks = tables.locks
    return (sa.update(locks)
            .where(locks.c.name == COUNTER, locks.c.value != UNCOUNTED)
            .values(value=locks.c.value + delta))
