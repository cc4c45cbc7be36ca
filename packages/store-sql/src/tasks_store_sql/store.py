"""``SQLStore``: the ``TaskStore`` on SQLAlchemy 2's asyncio Core — SQLite (the embedded
default), PostgreSQL and MariaDB/MySQL.

Capability matrix (each store reports its own; the plugin declares the maximum):

=================  ===========  ==========  =============  ============================
capability         SQLite file  SQLite mem  PostgreSQL     MariaDB/MySQL
=================  ===========  ==========  =============  ============================
durable            yes          no          yes            yes
multi_process      yes (file    no          yes            yes
                   locking)
wakeups            yes: any     no (poll)   yes            no (poll)
                   commit, by                LISTEN/NOTIFY
                   the change               (asyncpg; poll
                   counter                  on psycopg)
                   (~10 ms)
cancel_wakeups     yes: reads   no (heart-  yes            no (heartbeat)
                   the watched  beat)       LISTEN/NOTIFY
                   ids' status              (asyncpg;
                   on each                  heartbeat on
                   change                   psycopg)
exclusive_queues   yes          yes         yes            yes
batch_transitions  yes          yes         yes            yes
transactional_     yes          yes         yes            yes
submit
=================  ===========  ==========  =============  ============================

URL format (plain schemes pick the asyncio driver; an explicit ``+driver`` is kept):

- ``sqlite:///relative/tasks.db``, ``sqlite:////absolute/tasks.db``; ``sqlite://`` is an
  in-memory database (one process, not durable) — aiosqlite; SQLite's URI parameters
  need the path as a SQLite URI: ``sqlite:///file:tasks.db?mode=ro&uri=true``;
- ``postgresql://user:password@host:5432/dbname`` (also ``postgres://``,
  ``postgresql+asyncpg://``, ``postgresql+psycopg://``) — asyncpg by default (its hot
  path: one-statement claims, prepared statements, LISTEN/NOTIFY); ``+psycopg`` (extra
  ``tasks-store-sql[psycopg]``) runs the common SQLAlchemy path and polls;
- ``mysql://user:password@host:3306/dbname`` or ``mariadb://…`` (also ``+asyncmy``,
  ``+aiomysql``) — asyncmy, from the ``tasks-store-sql[mysql]`` extra (``+aiomysql``: the
  ``[aiomysql]`` extra, which keeps PyMySQL below 1.2.1, where aiomysql 0.3 breaks).
  MariaDB 10.6+ or MySQL 8.0+ (``SKIP LOCKED``).
- ``?namespace=name`` (any scheme): an isolated set of tables (``name_tasks``…) so several
  applications or test runs can share one database.

Options (``open_store(url, **options)`` or ``SQLStore(url, **options)``): ``clock``,
``namespace``, ``max_tasks``, ``max_active_tasks_per_scope``, ``limits``; ``engine`` (an
``AsyncEngine`` the application owns, instead of a URL: the store never disposes of it);
``schema`` — ``"create"`` (default: an empty namespace gets the current schema; an older
or newer one is refused with ``SchemaMismatch``), ``"upgrade"`` (also migrates an older
schema) or ``"check"`` (never runs DDL); ``busy_timeout`` (seconds a SQLite writer waits
for its turn in this process, and then for the file's lock, default 5);
``engine_options`` (passed to ``create_async_engine``).

Atomicity: every operation is one transaction. Operations on one task lock its row
(``SELECT … FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE`` serializes writers instead), read
the clock after the lock is held (``clock_timestamp()``, ``UTC_TIMESTAMP(6)``, SQLite
``strftime('now')``, or the injected ``clock``), apply :mod:`tasks_core.rules` and write
back with ``UPDATE … WHERE id AND row_version`` plus the event insert. ``transition`` is
``transition_many`` of one item: several transitions share one transaction and one commit
(group commit), each still guarded by its own revision and lease. On PostgreSQL with
asyncpg the hot path (claims, transitions, renew, release, progress) runs prebuilt
statements on the driver connection in four round trips per call (:mod:`._pg`).
Creators serialize on one lock row that also counts the stored tasks, so both capacity
limits hold under concurrent creators. ``claim_next`` never waits for another claimer
(``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import weakref
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core import reports, rules
from tasks_core.errors import (
    CapacityExceeded,
    InvalidInput,
    StoreCorrupt,
    TaskExists,
    TaskNotFound,
    Unavailable,
)
from tasks_core.events import EventRecord
from tasks_core.models import (
    NewTask,
    Snapshot,
    StoreCapabilities,
    TaskQuery,
    TaskStatus,
)

from tasks_store_sql import _codec
from tasks_store_sql._base import TaskRow
from tasks_store_sql._grouped import Grouped
from tasks_store_sql._pg import FastPath
from tasks_store_sql._schema import active
from tasks_store_sql._scopes import room_for_one
from tasks_store_sql._waits import WaitOps
from tasks_store_sql._writers import WriterQueue

__all__ = ["SQLStore"]

log = logging.getLogger("tasks_store_sql")
GROUP_MOST = 100
"""The most new tasks one statement creates (PostgreSQL)."""
CREATOR_WAIT = 30.0
"""Seconds a create waits for its turn among this store's creators (as long as a pool
checkout may wait) before it fails with ``StoreUnavailable``, nothing written."""


class SQLStore(WaitOps):
    """The SQL store (see the module docstring). Create with a URL or an engine; nothing
    touches the database until the first operation (or :meth:`open`)."""

    CAPABILITIES = StoreCapabilities(
        durable=True,
        multi_process=True,
        wakeups=True,
        exclusive_queues=True,
        batch_transitions=True,
        transactional_submit=True,
        cancel_wakeups=True,
    )
    """The most any URL gets (PostgreSQL); an instance reports its own."""

    def __init__(self, url: str | None = None, **options: Any) -> None:
        """Create a store; see the module docstring for URLs and options.

        Raises:
            InvalidInput: a bad URL or option, or a driver that is not installed.
        """
        super().__init__(url, **options)
        self._creators = None if self._db.kind == "sqlite" else WriterQueue(
            busy="Too many concurrent creates in this process: no turn"
        )
        """The FIFO of this store's creators in front of the creators' lock row (SQLite:
        its writer queue already serializes every write)."""
        self._creates: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, Grouped[NewTask, Snapshot | None]
        ] = weakref.WeakKeyDictionary()
        """Each event loop's creates, run together (PostgreSQL)."""
        if self._listens():
            self._fast = FastPath(self._db, self.tables, self._clock, self._channel,
                                  self.decoded, self._cancel_channel)

    @classmethod
    async def open(cls, url: str | None = None, **options: Any) -> SQLStore:
        """Create a store and check (or create) its schema now.

        Raises:
            InvalidInput: a bad URL or option.
            SchemaMismatch: the schema is older or newer than this code (see ``schema``).
            StoreUnavailable: the database is unavailable.
        """
        store = cls(url, **options)
        try:
            await store._ensure_ready()
        except BaseException:
            await store.aclose()
            raise
        return store

    async def now(self) -> datetime:
        """The store clock: the injected ``clock``, or database time (whole ms).

        Raises:
            StoreUnavailable: the database is unavailable.
        """
        if self._clock is not None:
            return rules.tick(self._clock.now())
        return await self._db.run(self._now, write=False)

    # -- creation ------------------------------------------------------------------------

    async def create(
        self,
        new: NewTask,
        *,
        replace: Snapshot | None = None,
        transaction: AsyncConnection | None = None,
    ) -> Snapshot:
        """Store ``new`` at revision 0 (see ``TaskStore.create``).

        Args:
            new: the task.
            replace: the current snapshot of a finished or expired task to replace.
            transaction: the application's connection, inside its own transaction (what
                ``App.submit(..., transaction=conn)`` passes): the task then exists if and
                only if that transaction commits. The creators' lock row is held until it
                ends, so keep that transaction short. The schema is checked on that
                connection and never created or migrated there (that would need another
                connection, which the open transaction may block): open the store first.

        Raises:
            TaskExists: the id is taken.
            RevisionConflict: ``replace`` is not the current run and revision.
            Unavailable: ``replace`` names a live task.
            TaskNotFound: ``replace`` names no task.
            CapacityExceeded: a capacity limit; nothing stored.
            InvalidInput: ``transaction`` is not an ``AsyncConnection``.
            SchemaMismatch: ``transaction`` given, and the namespace's schema is not the
                current one (open the store, or migrate, first).
            StoreCorrupt: the existing record fails validation.
            StoreUnavailable: transient failure; nothing stored.
        """
        if not isinstance(new, NewTask):
            raise InvalidInput("create() takes a NewTask")
        if transaction is not None:
            if not isinstance(transaction, AsyncConnection):
                raise InvalidInput("transaction must be the SQLAlchemy AsyncConnection your "
                                   "transaction runs on")
            await self._check_ready_on(transaction)
            return await self._create(new, replace, transaction)
        await self._ensure_ready()
        if self._fast is not None and replace is None:  # PostgreSQL: with others at once
            created = await self._grouped_creates()(new)
            if created is not None:
                return created
        if self._creators is not None:
            async with self._creators.slot(CREATOR_WAIT):
                return await self._create(new, replace, None)
        return await self._create(new, replace, None)

    def _grouped_creates(self) -> Grouped[NewTask, Snapshot | None]:
        """The creates of this event loop, run together (:mod:`tasks_store_sql._grouped`)."""
        return self._of_this_loop(
            self._creates, lambda: Grouped(self._create_group, GROUP_MOST))

    async def _create_group(self, news: list[NewTask]) -> list[Snapshot | None]:
        """New tasks created in one statement, holding the creators' turn
        (``FastPath.create_at_once``); ``None`` for each it left to the transaction."""
        assert self._fast is not None
        assert self._creators is not None
        async with self._creators.slot(CREATOR_WAIT):
            return await self._fast.create_at_once(news, self.limits)

    async def _create(
        self, new: NewTask, replace: Snapshot | None, connection: AsyncConnection | None
    ) -> Snapshot:
        if self._fast is not None and connection is None:
            return await self._fast.create(new, replace, self.limits)

        async def op(conn: AsyncConnection) -> Snapshot:
            total = await self._lock_counter(conn)
            now = await self._now(conn)
            row = await self._fetch(conn, new.id, lock=True)
            current = row.decode() if row is not None else None
            if replace is None and current is not None:
                raise TaskExists(rules.present(current, now))
            if replace is not None:
                if current is None:
                    raise TaskNotFound(new.id)
                rules.check_replace(current, replace, now)
            if row is None and total >= self.limits.tasks_cap:
                raise CapacityExceeded("max_tasks")
            room = await room_for_one(
                total - (1 if row is not None else 0),
                self.limits.scope_cap,
                lambda: self._scope_bound(conn, new.tenant),
                lambda: self._count_active(conn, new.tenant, new.id, now),
            )
            if room.full:
                raise CapacityExceeded("max_active_tasks_per_scope")
            snapshot = rules.new_snapshot(new, now, replace=current)
            await self._put_new(conn, row, snapshot)
            await self._keep_scope_bound(conn, new.tenant, room)
            await self._notify(conn, snapshot.queue)
            return snapshot

        return await self._db.run(op, write=True, connection=connection)

    async def _count_active(
        self, conn: AsyncConnection, tenant: str, other_than: str, now: datetime
    ) -> int:
        """Active tasks of ``tenant`` (not terminal, not expired), counted up to the limit
        — on MariaDB by a locking read (see ``_scope_bound``), which holds the rows it
        counted until the transaction ends (a claim skips them; a completion waits)."""
        t = self.tables.tasks
        rows = (
            sa.select(t.c.id)
            .where(
                t.c.tenant == tenant,
                active(t.c.status),
                sa.or_(t.c.expires_at.is_(None), t.c.expires_at > now),
                t.c.id != other_than,
            )
            .limit(self.limits.scope_cap)
        )
        if self._db.kind == "mysql":
            rows = rows.with_for_update(read=True)
        capped = rows.subquery()
        count = sa.select(sa.func.count()).select_from(capped)
        return int((await conn.execute(count)).scalar_one())

    async def _put_new(
        self, conn: AsyncConnection, row: TaskRow | None, snapshot: Snapshot
    ) -> None:
        t = self.tables
        values = _codec.projection(snapshot, None)
        if row is None:
            await conn.execute(sa.insert(t.tasks).values(id=snapshot.id, row_version=0, **values))
            await self._add_to_counter(conn, 1)
        else:
            await conn.execute(sa.delete(t.events).where(t.events.c.task_id == snapshot.id))
            await conn.execute(sa.delete(t.members).where(t.members.c.task_id == snapshot.id))
            await self._save(conn, row, snapshot, None)
        members = _codec.member_rows(snapshot)
        if members:
            await conn.execute(sa.insert(t.members), members)

    # -- reads ---------------------------------------------------------------------------

    async def _visible(
        self, conn: AsyncConnection, task_id: str, tenant: str | None
    ) -> tuple[Snapshot, datetime]:
        if tenant is not None and not isinstance(tenant, str):
            raise InvalidInput("tenant must be a string or None")
        row = await self._fetch(conn, task_id, lock=False)
        now = await self._now(conn)
        if row is None:
            raise TaskNotFound(task_id)
        snapshot = row.decode()
        if (tenant is not None and snapshot.tenant != tenant) or snapshot.expired(now):
            raise TaskNotFound(task_id)
        return snapshot, now

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
        events = self.tables.events

        async def op(conn: AsyncConnection) -> list[EventRecord]:
            await self._visible(conn, task_id, tenant)
            rows = await conn.execute(
                sa.select(events.c.record)
                .where(events.c.task_id == task_id)
                .order_by(events.c.revision)
            )
            return [_codec.decode_record(task_id, r[0]) for r in rows]

        return await self._db.run(op, write=False)

    async def list(self, query: TaskQuery) -> builtins.list[Snapshot]:
        """Matching tasks ordered by id (see ``TaskStore.list``); expired and corrupt
        records are left out without shortening the page.

        Raises:
            StoreUnavailable: transient failure.
        """
        if not isinstance(query, TaskQuery):
            raise InvalidInput("list() takes a TaskQuery")
        await self._ensure_ready()

        async def op(conn: AsyncConnection) -> list[Snapshot]:
            now = await self._now(conn)
            page: list[Snapshot] = []
            after = query.after
            while len(page) < query.limit:
                want = query.limit - len(page)
                rows = (await conn.execute(self._listing(query, now, after, want))).all()
                for task_id, text in rows:
                    try:
                        snapshot = _codec.decode_snapshot(task_id, text)
                    except StoreCorrupt:
                        reports.corrupt_skipped(log, task_id, "a listing")
                        continue
                    if rules.matches(snapshot, query, now):
                        page.append(rules.present(snapshot, now))
                if len(rows) < want:
                    break
                after = rows[-1][0]
            return page

        return await self._db.run(op, write=False)

    def _listing(
        self, query: TaskQuery, now: datetime, after: str | None, limit: int
    ) -> sa.Select[Any]:
        t = self.tables.tasks
        stmt = sa.select(t.c.id, t.c.snapshot).where(
            sa.or_(t.c.expires_at.is_(None), t.c.expires_at > now)
        )
        if query.tenant is not None:
            stmt = stmt.where(t.c.tenant == query.tenant)
        if after is not None:
            stmt = stmt.where(t.c.id > after)
        if query.queue is not None:
            stmt = stmt.where(t.c.queue == query.queue)
        if query.principal is not None:
            m = self.tables.members
            members = sa.select(m.c.task_id).where(
                m.c.tenant == query.principal.tenant, m.c.user_id == query.principal.user_id
            )
            stmt = stmt.where(t.c.id.in_(members))
        if query.statuses is not None:
            wanted = [self._status_is(s, now) for s in query.statuses]
            stmt = stmt.where(sa.or_(sa.false(), *wanted))
        return stmt.order_by(t.c.id).limit(limit)

    def _status_is(self, status: TaskStatus, now: datetime) -> sa.ColumnElement[bool]:
        t = self.tables.tasks
        if status == TaskStatus.RUNNING:
            return sa.and_(t.c.status == TaskStatus.PENDING.value, t.c.claim_expires_at > now)
        if status == TaskStatus.PENDING:
            return sa.and_(
                t.c.status == TaskStatus.PENDING.value,
                sa.or_(t.c.claim_expires_at.is_(None), t.c.claim_expires_at <= now),
            )
        return t.c.status == status.value

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
                    sa.select(t.c.id, t.c.snapshot)
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
                for task_id, text in rows:
                    try:
                        snapshot = _codec.decode_snapshot(task_id, text)
                    except StoreCorrupt:
                        log.warning("reap skipped the corrupt record of task %r", task_id)
                        kept.append(task_id)
                        continue
                    if snapshot.expired(now):
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
                document = json.loads(row.snapshot)
            except ValueError:
                document = {"id": task_id}
            document["revision"] = "not a number: tasks-corrupt-secret"
            await conn.execute(
                sa.update(t).where(t.c.id == task_id).values(snapshot=_codec.encode(document))
            )

        await self._db.run(op, write=True)
