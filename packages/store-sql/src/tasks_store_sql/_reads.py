"""Reads and administration on the SQL path, every dialect: ``get``, ``history``,
``delete``, ``reap`` (and the contract suite's ``_corrupt``); ``list`` is
:mod:`tasks_store_sql._listing`'s.

A read takes no lock and reads the clock in the same transaction; an expired task is
invisible (``TaskNotFound``) and a corrupt record is left out of a listing, not fatal.
``delete`` and ``reap`` hold the creators' lock row, which counts the stored tasks.
"""

from __future__ import annotations

import builtins
import json
import logging
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core import rules
from tasks_core.errors import InvalidInput, StoreCorrupt, TaskNotFound, Unavailable
from tasks_core.events import EventRecord
from tasks_core.models import Snapshot

from tasks_store_sql import _codec
from tasks_store_sql._listing import ListOps
from tasks_store_sql._stored import Stored, stored_columns

__all__ = ["ReadOps"]

log = logging.getLogger("tasks_store_sql")


class ReadOps(ListOps):
    """Reads and administration (see the module docstring)."""

    # -- reads ---------------------------------------------------------------------------

    async def _visible(
        self, conn: AsyncConnection, task_id: str, tenant: str | None
    ) -> tuple[Snapshot, datetime]:
        rules.check_tenant(tenant)
        row = await self._fetch(conn, task_id, lock=False, tenant=tenant)
        now = await self._now(conn)
        return _seen(task_id, None if row is None else row.stored, tenant, now), now

    async def get(self, task_id: str, *, tenant: str | None) -> Snapshot:
        """The current snapshot (see ``TaskStore.get``).

        Raises:
            TaskNotFound: unknown, in another tenant, or expired.
            StoreCorrupt: the record fails validation.
            StoreUnavailable: transient failure.
        """
        await self._ensure_ready()

        async def op(conn: AsyncConnection) -> Snapshot:
            snapshot, now = await self._visible(conn, task_id, tenant)
            return rules.present(snapshot, now)

        return await self._db.run(op, write=False)

    async def history(self, task_id: str, *, tenant: str | None) -> builtins.list[EventRecord]:
        """Applied events of the current run, in order (see ``TaskStore.history``).

        Raises:
            TaskNotFound: as for :meth:`get`.
            StoreCorrupt: the record or one of its events fails validation.
            StoreUnavailable: transient failure.
        """
        await self._ensure_ready()
        t, events = self.tables.tasks, self.tables.events

        async def op(conn: AsyncConnection) -> list[EventRecord]:
            rules.check_tenant(tenant)
            if not isinstance(task_id, str):
                raise InvalidInput("task_id must be a string")
            read = sa.select(t.c.final_event, *stored_columns(t)).where(t.c.id == task_id)
            if tenant is not None:  # another tenant's row is never read (as ``_fetch``)
                read = read.where(t.c.tenant == tenant)
            row = (await conn.execute(read)).first()  # with the final event of its run
            now = await self._now(conn)
            snapshot = _seen(task_id, None if row is None else Stored(*row[1:]), tenant, now)
            found = await conn.execute(
                sa.select(events.c.record)
                .where(events.c.task_id == task_id)
                .order_by(events.c.revision)
            )
            records = [_codec.decode_record(task_id, r[0]) for r in found]
            if row is not None and row[0] is not None:  # the last record
                records.append(_codec.final_record(snapshot, row[0]))
            return records

        return await self._db.run(op, write=False)

    # -- administration ------------------------------------------------------------------

    async def delete(self, task_id: str, *, expected_revision: int) -> None:
        """Remove a terminal task with its history (see ``TaskStore.delete``).

        Raises:
            TaskNotFound: unknown task.
            RevisionConflict: ``expected_revision`` is not current.
            Unavailable: the task is not terminal.
            StoreCorrupt: the record fails validation.
            StoreUnavailable: transient failure.
        """
        await self._ensure_ready()

        async def op(conn: AsyncConnection) -> None:
            await self._lock_counter(conn)
            row = await self._fetch(conn, task_id, lock=True)
            if row is None:
                raise TaskNotFound(task_id)
            now = await self._now(conn)
            snapshot = row.decode()
            rules.check_revision(snapshot, expected_revision, now)
            if not snapshot.terminal:
                raise Unavailable("Only a terminal task can be deleted")
            await self._delete_tasks(conn, [task_id])

        await self._db.run(op, write=True)

    async def reap(self, limit: int = 1000) -> builtins.list[str]:
        """Delete up to ``limit`` expired tasks with their history (see
        ``TaskStore.reap``); a corrupt record is skipped, not fatal.

        Raises:
            InvalidInput: ``limit`` < 1.
            StoreUnavailable: transient failure.
        """
        rules.check_limit(limit)
        await self._ensure_ready()
        t = self.tables.tasks

        async def op(conn: AsyncConnection) -> list[str]:
            await self._lock_counter(conn)
            now = await self._now(conn)
            reaped: list[str] = []
            kept: list[str] = []  # read but not reaped: corrupt, or not expired after all
            while len(reaped) < limit:
                want = min(limit - len(reaped), 500)
                stmt = (  # the expiry index, soonest expired first
                    sa.select(t.c.id, *stored_columns(t))
                    .where(t.c.expires_at <= now)
                    .order_by(t.c.expires_at, t.c.id)
                    .limit(want)
                )
                if kept:
                    stmt = stmt.where(t.c.id.not_in(kept))
                if self._db.kind != "sqlite":
                    stmt = stmt.with_for_update(skip_locked=True)
                rows = (await conn.execute(stmt)).all()
                batch = []
                for task_id, *stored in rows:
                    try:
                        snapshot = _codec.decode_snapshot(task_id, Stored(*stored))
                    except StoreCorrupt:
                        log.warning("reap skipped the corrupt record of task %r", task_id)
                        kept.append(task_id)
                        continue
                    if rules.gone(snapshot, now):  # not under a live lease
                        batch.append(task_id)
                    else:
                        kept.append(task_id)
                await self._delete_tasks(conn, batch)
                reaped += batch
                if len(rows) < want:
                    break
            log.debug("reaped %d expired task(s)", len(reaped))  # the reaper logs each sweep
            return reaped

        return await self._db.run(op, write=True)

    # -- test support --------------------------------------------------------------------

    async def _corrupt(self, task_id: str) -> None:
        """Damage the stored snapshot of ``task_id`` (contract-suite support only)."""
        t = self.tables.tasks

        async def op(conn: AsyncConnection) -> None:
            row = await self._fetch(conn, task_id, lock=True)
            if row is None:
                raise TaskNotFound(task_id)
            try:
                document = json.loads(row.stored.body)
            except ValueError:
                document = {"id": task_id}
            document["work"] = "not a work: tasks-corrupt-secret"
            await conn.execute(
                sa.update(t).where(t.c.id == task_id).values(snapshot=_codec.encode(document))
            )

        await self._db.run(op, write=True)


def _seen(task_id: str, stored: Stored | None, tenant: str | None, now: datetime) -> Snapshot:
    """The task of the row's ``stored`` columns (``None``: no row), if a reader of
    ``tenant`` may see it at ``now``. Another tenant's is missing on its ``tenant`` column
    (which the read compares first, so its row is not even read), never decoded: its
    answer costs what a missing id's does, whatever its size.

    Raises:
        TaskNotFound: no row, another tenant's task, or an expired one.
        StoreCorrupt: the reader's tenant's record fails validation.
    """
    if stored is None or (tenant is not None and stored.tenant != tenant):
        raise TaskNotFound(task_id)
    snapshot = _codec.decode_snapshot(task_id, stored)
    if snapshot.expired(now):
        raise TaskNotFound(task_id)
    return snapshot
