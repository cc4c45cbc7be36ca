"""PostgreSQL's ``create_many`` on asyncpg: a batch of new tasks in one transaction of a
few prepared statements, however many tasks it holds.

The creators' lock with the clock (``counter``; the count started or none kept:
``_counting``), the rows holding any of the batch's ids (one ``= ANY`` read, locked), each
tenant's room by its bound (``bound``/``active`` only when the stored tasks alone do not
show room; nothing while uncounted), then one statement inserts every task
from arrays of the columns that differ between new tasks (:data:`NEW_ARRAYS`; the clock
and ``NULL`` lease and retry columns are the same for all) with its members, the count
and the ``NOTIFY``; each tenant's bound is written once. ``storekit`` decides; a refusal
rolls everything back. In the application's transaction: the SQL path's.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core import rules, storekit
from tasks_core.errors import StoreUnavailable
from tasks_core.models import NewTask, Snapshot

from tasks_store_sql import _codec
from tasks_store_sql._batch import Loaded
from tasks_store_sql._scopes import rooms_for_batch, scope_lock
from tasks_store_sql._stored import stored_columns
from tasks_store_sql.postgres._create_sql import NEW_COLUMNS, _inserted
from tasks_store_sql.postgres._creates import PostgresCreates
from tasks_store_sql.postgres._statements import _TIMESTAMP, Statement, _counts

__all__ = ["NEW_ARRAYS", "PostgresBulk"]

_TEXT = postgresql.ARRAY(sa.Text)
NEW_ARRAYS: tuple[tuple[str, sa.types.TypeEngine[Any]], ...] = (
    *NEW_COLUMNS, ("run_at", _TIMESTAMP), ("expires_at", _TIMESTAMP), ("snapshot", sa.Text()),
)
"""The projection columns (``_codec.projection``) a batch sends as arrays, one value a
task; a new task's ``created_at`` and ``updated_at`` are the batch's ``now``, its
``available_at`` its ``run_at``, else ``now`` (``rules.available_at`` of a task with no
retry), and its lease and retry columns ``NULL``."""


class _TakenSince(Exception):
    """An id of the batch was taken between its read and the insert (the insert is rolled
    back, then the batch refused with the task that took it)."""

    def __init__(self, now: datetime) -> None:
        super().__init__("an id of the batch was taken since it was read")
        self.now = now


class PostgresBulk(PostgresCreates):
    """``create_many`` on the driver (see the module docstring)."""

    @functools.cached_property
    def _taken_sql(self) -> Statement:
        """The rows of the ids of array ``ids``, locked (as ``_batch.Loaded.of`` reads
        them)."""
        t = self.tables.tasks
        return Statement.of(
            sa.select(t.c.id, *stored_columns(t), t.c.claim_token, t.c.row_version)
            .where(t.c.id == sa.func.any(sa.bindparam("ids", type_=_TEXT)))
            .with_for_update()
        )

    @functools.cached_property
    def _insert_many_sql(self) -> Statement:
        """Insert the new tasks of arrays ``ids`` and :data:`NEW_ARRAYS`, created at
        ``now``, with their members (JSON ``members``), count them and wake their queues;
        the counts of tasks, counter rows, members and notifications written."""
        names = [name for name, _ in NEW_ARRAYS]
        rows = sa.func.unnest(
            sa.bindparam("ids", type_=_TEXT),
            *(sa.bindparam(name, type_=postgresql.ARRAY(type_)) for name, type_ in NEW_ARRAYS),
        ).table_valued("id", *names).render_derived()
        now = sa.bindparam("now", type_=_TIMESTAMP)
        values = sa.select(rows.c.id, sa.literal(0, sa.Integer), *(rows.c[n] for n in names),
                           now, now, sa.func.coalesce(rows.c.run_at, now))
        columns = ["id", "row_version", *names, "created_at", "updated_at", "available_at"]
        return Statement.of(sa.select(*_counts(*_inserted(
            self.tables, self.sql.channel, columns, values))))

    @functools.cached_property
    def _raise_bound_sql(self) -> Statement:
        """Raise the bound row ``name`` by ``by``, if there is one."""
        locks = self.tables.locks
        return Statement.of(
            sa.update(locks)
            .where(locks.c.name == sa.bindparam("name", type_=sa.Text))
            .values(value=locks.c.value + sa.bindparam("by", type_=sa.BigInteger))
        )

    async def _create_batch(
        self, batch: Sequence[NewTask], connection: AsyncConnection | None
    ) -> builtins.list[Snapshot]:
        """The checked ``batch`` in one transaction on the driver (``connection``: the
        application's, on the SQL path).

        Raises:
            TaskExists, CapacityExceeded: nothing written.
            StoreCorrupt: a row holding one of the ids fails validation.
            StoreUnavailable: transient failure, or the creators' row is missing.
        """
        if connection is not None:
            return await super()._create_batch(batch, connection)
        sql, limits = self.sql, self.limits

        async def op(driver: Any) -> list[Snapshot]:
            total, clock, _ = await self._held_count(driver, batch[0].id)
            now = rules.tick(clock)
            await self._refuse_taken(driver, batch, now)
            rooms = {} if total is None else await rooms_for_batch(
                batch, total, limits, functools.partial(self._bound, driver),
                functools.partial(self._active, driver, now=now))
            snapshots = storekit.new_snapshots(batch, now)
            if not await self._insert_many(driver, snapshots, now, counted=total is not None):
                raise _TakenSince(now)  # (rolls back what the statement wrote)
            for tenant, (room, count) in rooms.items():
                name = scope_lock(tenant)
                if room.bound is None:
                    statement = self._raise_bound_sql
                    await driver.execute(statement.sql, *statement.args(name=name, by=count))
                else:
                    await driver.execute(sql.store_bound.sql,
                                         *sql.store_bound.args(name=name, value=room.bound))
            return snapshots

        try:
            return await self._db.run_driver(op)
        except _TakenSince as raced:  # an uncounted create took an id since it was read
            await self._db.run_driver(functools.partial(self._refuse_taken, batch=batch,
                                                        now=raced.now))
            raise StoreUnavailable("A task of the batch was created concurrently: "
                                   "nothing was written") from None

    async def _refuse_taken(self, driver: Any, batch: Sequence[NewTask], now: datetime) -> None:
        """Refuse ``batch`` when a stored task holds one of its ids (locked as read).

        Raises:
            TaskExists: the task of the first such id, as ``storekit.refuse_taken``.
        """
        found = await driver.fetch(self._taken_sql.sql, *self._taken_sql.args(
            ids=[new.id for new in batch]))
        storekit.refuse_taken(batch, {row[0]: Loaded.of(row).snapshot for row in found}, now)

    async def _insert_many(
        self, driver: Any, snapshots: Sequence[Snapshot], now: datetime, *, counted: bool
    ) -> bool:
        """Insert ``snapshots``, new tasks created at ``now``, in one statement; added to
        the count when ``counted``. ``False`` when an id was taken since it was read (no
        creators' lock keeps other creates out while nothing is counted): the caller then
        writes nothing.

        Raises:
            StoreUnavailable: the creators' lock row is missing (nothing is committed).
        """
        values: dict[str, Any] = {"ids": [s.id for s in snapshots]}
        projected = [_codec.projection(s, None) for s in snapshots]
        for name, _ in NEW_ARRAYS:
            values[name] = [p[name] for p in projected]
        members = [m for s in snapshots for m in _codec.member_rows(s)]
        statement = self._insert_many_sql
        counts = await driver.fetchrow(statement.sql, *statement.args(
            now=now, members=_codec.encode(members), **values))
        if counts[0] != len(snapshots):
            return False
        if tuple(counts[1:3]) != (int(counted), len(members)):
            raise StoreUnavailable("The creators' lock row is missing: nothing was written")
        return True

    async def _bound(self, driver: Any, tenant: str) -> int | None:
        """The stored bound of ``tenant`` (:mod:`tasks_store_sql._scopes`)."""
        statement = self.sql.bound
        value = await driver.fetchval(statement.sql, *statement.args(name=scope_lock(tenant)))
        return None if value is None else int(value)

    async def _active(self, driver: Any, tenant: str, now: Any) -> int:
        """The active tasks of ``tenant`` at ``now``, counted up to the limit."""
        statement = self.sql.active
        return int(await driver.fetchval(statement.sql, *statement.args(
            tenant=tenant, now=now, id="", cap=self.limits.scope_cap)))
