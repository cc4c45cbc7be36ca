"""``create_many`` on the SQL path (capability ``batch_create``): a batch of new tasks in
one transaction, all or nothing, in the creators' turn.

The creators' lock row is taken first (it counts the stored tasks, if anything is
counted: ``_counting``), the clock read after it, then the rows holding any of the batch's
ids (a locking read), each tenant's room by its bound
(:func:`~tasks_store_sql._scopes.room_for`); ``storekit`` decides. The tasks go in with
one multi-row insert, their members with another; the count and each tenant's bound are
written once per batch, when counted.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from functools import partial

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core import storekit
from tasks_core.errors import StoreUnavailable
from tasks_core.models import NewTask, Snapshot

from tasks_store_sql import _codec
from tasks_store_sql._base import TaskRow
from tasks_store_sql._scopes import rooms_for_batch
from tasks_store_sql._waits import WaitOps

__all__ = ["BulkCreates"]


class BulkCreates(WaitOps):
    """The batch creates of the SQL path (``SQLStore`` adds the public ``create_many``)."""

    def _creator_turn(self) -> AbstractAsyncContextManager[None]:
        """This store's turn among its creators (``SQLStore``'s)."""
        raise NotImplementedError

    async def _count_active(
        self, conn: AsyncConnection, tenant: str, other_than: str, now: datetime
    ) -> int:
        """Active tasks of ``tenant`` counted up to the limit (``SQLStore``'s)."""
        raise NotImplementedError

    async def _create_batch(
        self, batch: Sequence[NewTask], connection: AsyncConnection | None
    ) -> builtins.list[Snapshot]:
        """Create the checked ``batch`` in one transaction (``connection``: the
        application's) or nothing.

        Raises:
            TaskExists, CapacityExceeded: nothing written.
            StoreCorrupt: a row holding one of the ids fails validation.
            StoreUnavailable: transient failure; nothing written.
        """
        async def op(conn: AsyncConnection) -> list[Snapshot]:
            total = await self._counted_total(conn)
            now = await self._now(conn)
            taken = {row.id: row.decode() for row in await self._rows_of(conn, batch)}
            storekit.refuse_taken(batch, taken, now)
            rooms = {} if total is None else await rooms_for_batch(
                batch, total, self.limits, partial(self._scope_bound, conn),
                partial(self._count_active, conn, other_than="", now=now))
            snapshots = storekit.new_snapshots(batch, now)
            if not await self._insert_new(conn, snapshots, counted=total is not None):
                taken = {row.id: row.decode() for row in await self._rows_of(conn, batch)}
                storekit.refuse_taken(batch, taken, now)
                raise StoreUnavailable("A task of the batch was created concurrently: "
                                       "nothing was written")
            if total is not None:
                await self._add_to_counter(conn, len(snapshots))
            members = [m for s in snapshots for m in _codec.member_rows(s)]
            if members:
                await conn.execute(sa.insert(self.tables.members), members)
            for tenant, (room, count) in rooms.items():
                await self._keep_scope_bound(conn, tenant, room, count)
            for queue in dict.fromkeys(s.queue for s in snapshots):
                await self._notify(conn, queue)
            return snapshots

        return await self._db.run(op, write=True, connection=connection)

    async def _insert_new(
        self, conn: AsyncConnection, snapshots: Sequence[Snapshot], *, counted: bool
    ) -> bool:
        """Insert the tasks of ``snapshots`` (their ids free as read, the creators' row
        held); ``False``, none of them written, when one of the ids was taken since. That
        happens only on PostgreSQL while nothing is ``counted``: its one-statement
        creates hold no creators' row then (``_counting``). There the insert runs in a
        savepoint, ``ON CONFLICT DO NOTHING``, and a short one is rolled back to it (the
        application's transaction, if it is one, stays usable)."""
        tasks = self.tables.tasks
        rows = [{"id": s.id, "row_version": 0, **_codec.projection(s, None)} for s in snapshots]
        if counted or self._db.kind != "postgresql":
            await conn.execute(sa.insert(tasks), rows)
            return True
        savepoint = await conn.begin_nested()
        try:
            insert = (postgresql.insert(tasks).on_conflict_do_nothing(index_elements=[tasks.c.id])
                      .returning(tasks.c.id))
            written = len((await conn.execute(insert, rows)).all())
        except BaseException:
            await savepoint.rollback()
            raise
        if written == len(rows):
            await savepoint.commit()
            return True
        await savepoint.rollback()
        return False

    async def _rows_of(self, conn: AsyncConnection, batch: Sequence[NewTask]) -> list[TaskRow]:
        """The stored rows holding any id of ``batch`` (locked, but on SQLite, whose
        writers are serialized)."""
        t = self.tables.tasks
        stmt = sa.select(*self._task_columns()).where(t.c.id.in_([new.id for new in batch]))
        if self._db.kind != "sqlite":
            stmt = stmt.with_for_update()
        return [TaskRow.of(row) for row in await conn.execute(stmt)]
