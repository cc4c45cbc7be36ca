"""What every operation of :class:`~tasks_store_sql.store.SQLStore` shares: opening,
schema readiness, the clock, and reading/writing one task row."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from tasks_core import rules
from tasks_core.clock import Clock
from tasks_core.durations import Seconds, check_duration
from tasks_core.errors import InvalidInput, StoreUnavailable
from tasks_core.events import EventRecord
from tasks_core.models import Snapshot, StoreCapabilities, StoreLimits
from tasks_core.plugins import check_create

from tasks_store_sql import _codec
from tasks_store_sql._counting import add_to_count, counted_total, lock_count
from tasks_store_sql._db import Database
from tasks_store_sql._dialect import (
    check_server_version,
    create_engine,
    kind_of,
    loop_engine_factory,
)
from tasks_store_sql._errors import translate
from tasks_store_sql._migrate import (
    SchemaMismatch,
    SchemaState,
    migrate_database,
    mismatch,
    ready_schema,
    schema_state,
)
from tasks_store_sql._opening import SchemaMode, check_file_exists, schema_mode
from tasks_store_sql._options import check_engine_options
from tasks_store_sql._prebuilt import Prebuilt
from tasks_store_sql._schema import (
    COUNTER,
    Tables,
    check_namespace,
    prefix_of,
)
from tasks_store_sql._scopes import Room, scope_lock
from tasks_store_sql._stored import STORED_COLUMNS, Stored, stored_columns
from tasks_store_sql._url import Target, parse_url, sqlite_path_of
from tasks_store_sql._writers import WriterQueue, writer_queue

__all__ = ["SchemaMode", "StoreBase", "TaskRow"]


MAX_BUSY_TIMEOUT_S = 3600
"""The longest ``busy_timeout``, in seconds: how long a SQLite writer waits for its turn
and for the file's lock before ``StoreUnavailable``."""
_memory_ids = itertools.count(1)


@dataclass(frozen=True)
class TaskRow:
    """A ``tasks`` row as operations need it (read by :meth:`StoreBase._task_columns`)."""

    id: str
    stored: Stored
    token: str | None
    row_version: int
    revision: int

    @classmethod
    def of(cls, row: Sequence[Any]) -> TaskRow:
        """The row read as ``StoreBase._task_columns`` (and any columns after them)."""
        width = len(STORED_COLUMNS)
        return cls(row[0], Stored(*row[1:1 + width]), *row[1 + width:4 + width])

    def decode(self) -> Snapshot:
        """The stored snapshot.

        Raises:
            StoreCorrupt: it fails validation.
        """
        return _codec.decode_snapshot(self.id, self.stored)


class StoreBase:
    """Construction, readiness and row helpers (see ``SQLStore``)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        engine: AsyncEngine | None = None,
        namespace: str | None = None,
        clock: Clock | None = None,
        limits: StoreLimits | None = None,
        max_tasks: int | None = None,
        max_active_tasks_per_scope: int | None = None,
        schema: SchemaMode = "create",
        busy_timeout: Seconds = 5.0,
        engine_options: Mapping[str, Any] | None = None,
        create: bool = True,
    ) -> None:
        if (url is None) == (engine is None):
            raise InvalidInput("SQLStore needs exactly one of a URL or an engine")
        self._may_create = check_create(create)
        schema = schema_mode(schema, self._may_create)
        busy_timeout = check_duration(busy_timeout, "busy_timeout", high=MAX_BUSY_TIMEOUT_S)
        engine_options = check_engine_options(engine_options)
        target: Target | None = parse_url(url) if url is not None else None
        if not self._may_create and target is not None:
            check_file_exists(target)
        if target is not None and target.namespace is not None:
            if namespace is not None and namespace != target.namespace:
                raise InvalidInput("namespace given twice (option and URL) with two values")
            namespace = target.namespace
        try:
            self.namespace = check_namespace(namespace)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
        self.limits = StoreLimits.resolve(
            limits, max_tasks=max_tasks, max_active_tasks_per_scope=max_active_tasks_per_scope
        )
        self.tables = Tables.build(prefix_of(self.namespace))
        self._clock = clock
        self._schema_mode: SchemaMode = schema
        self._ready = False
        self._queue_locks: set[str] = set()
        self._db = self._database(target, engine, busy_timeout, engine_options)
        self._durable = not self._db.memory
        self.decoded = _codec.Decoded()  # snapshots written or claimed, for the next lock

    def _database(
        self,
        target: Target | None,
        engine: AsyncEngine | None,
        busy_timeout: float,
        engine_options: Mapping[str, Any] | None,
    ) -> Database:
        memory = False
        loop_engine = None
        if target is not None:
            engine = create_engine(target, busy_timeout=busy_timeout, options=engine_options,
                                   set_wal=self._may_create)
            loop_engine = loop_engine_factory(target, engine_options)
            memory = target.memory
        assert engine is not None
        kind = kind_of(engine)
        writers: WriterQueue | None = None
        if kind == "sqlite":
            database = engine.url.database
            memory = memory or database in (None, "", ":memory:")
            key = f":memory:{next(_memory_ids)}" if memory else sqlite_file(engine)
            writers = WriterQueue() if memory else writer_queue(key)
        db = Database(
            engine=engine,
            kind=kind,
            owns_engine=target is not None,
            managed_sqlite=target is not None and kind == "sqlite",
            memory=memory,
            writers=writers,
            busy_timeout=float(busy_timeout),
            loop_engine=loop_engine,
        )
        if kind == "sqlite" and target is None:
            db.write_prelude = self._take_write_lock
        return db

    # -- capabilities and readiness ------------------------------------------------------

    @property
    def capabilities(self) -> StoreCapabilities:
        """What this store offers on its database (see the module docstring)."""
        return StoreCapabilities(
            durable=self._durable,
            multi_process=self._durable,
            wakeups=self._wakeups_supported(),
            exclusive_queues=True,
            queue_limits=True,
            batch_transitions=True,
            batch_create=True,
            transactional_submit=True,
            cancel_wakeups=self._wakeups_supported(),  # the same databases
            counts=True,
        )

    def _wakeups_supported(self) -> bool:
        return False  # overridden: PostgreSQL with asyncpg, a SQLite file

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine (owned by the store only if it made it from a URL)."""
        return self._db.engine

    @property
    def dialect(self) -> str:
        """``"sqlite"``, ``"postgresql"`` or ``"mysql"`` (MariaDB included)."""
        return self._db.kind

    async def _schema_on(self, conn: AsyncConnection) -> tuple[SchemaState, str | None]:
        """The namespace's schema state and revision, read on ``conn``.

        Raises:
            InvalidInput: a server version the store does not support.
        """
        check_server_version(conn.dialect)
        return await schema_state(conn, self.tables)

    async def _ensure_ready(self) -> None:
        """The schema in place, as the schema mode allows (once per store).

        Raises:
            SchemaMismatch, StoreUnavailable, InvalidInput: as :func:`ready_schema`.
        """
        if not self._ready:
            await ready_schema(self._db, self.tables, self._schema_mode, self._schema_on)
            self._ready = True

    async def _check_ready_on(self, conn: AsyncConnection) -> None:
        """Check the schema on the application's ``conn`` (inside its transaction) without
        creating or migrating anything.

        Raises:
            SchemaMismatch: the schema is not the current one; says to open the store or
                migrate first.
            StoreUnavailable: the database is unavailable.
        """
        if self._ready:
            return
        with translate(self._db.what):
            state, current = await self._schema_on(conn)
        if state != "current":
            raise SchemaMismatch(
                f"{mismatch(self.tables, state, current)}. A task created inside your own "
                "transaction needs the schema in place first: open the store (await "
                "SQLStore.open(...) creates an empty namespace's schema) or migrate before "
                "the transaction begins"
            )
        self._ready = True

    async def migrate(self, to: str = "head") -> str | None:
        """Move this store's namespace to schema revision ``to`` (``"head"`` by default;
        ``"base"`` removes every table). Safe to run from several processes at once.

        Returns:
            The revision the namespace was at before (``None``: it had no schema).

        Raises:
            InvalidInput: an unknown revision.
            SchemaMismatch: the namespace is at a revision this code does not know.
            StoreUnavailable: the database is unavailable.
        """
        before = await migrate_database(self._db, self.tables, to)
        self._ready = False
        return before

    async def schema_revision(self) -> str | None:
        """The namespace's schema revision (``None``: no schema).

        Raises:
            StoreUnavailable: the database is unavailable.
        """
        async with self._db.connection(write=False) as conn:
            state, current = await schema_state(conn, self.tables)
        return current if state in ("current", "older", "newer") else None

    # -- helpers -------------------------------------------------------------------------

    async def _now(self, conn: AsyncConnection) -> datetime:
        """The store clock (injected, or the database's), whole milliseconds."""
        if self._clock is not None:
            return rules.tick(self._clock.now())
        return rules.tick(await self._db.now(conn))

    async def _take_write_lock(self, conn: AsyncConnection) -> None:
        """SQLite on an engine we do not manage: take the write lock at once."""
        locks = self.tables.locks
        await conn.execute(
            sa.update(locks).where(locks.c.name == COUNTER).values(value=locks.c.value)
        )

    def _task_columns(self) -> list[sa.ColumnElement[Any]]:
        """What :class:`TaskRow` reads: the id, the stored task, the token, the row's
        version and the revision."""
        t = self.tables.tasks
        return [t.c.id, *stored_columns(t), t.c.claim_token, t.c.row_version, t.c.revision]

    @functools.cached_property
    def _statements(self) -> Prebuilt:
        """The statements every operation runs, built once (SQLAlchemy then reuses their
        compiled form: no statement is built per call)."""
        return Prebuilt.build(self.tables, self._task_columns(), lock=self._db.kind != "sqlite")

    async def _fetch(
        self, conn: AsyncConnection, task_id: str, *, lock: bool, tenant: str | None = None
    ) -> TaskRow | None:
        """The row of ``task_id`` (locked for update when ``lock``), or ``None``; with
        ``tenant`` (a read, unlocked), only that tenant's: the database compares the tenant,
        so another tenant's row — its document however large — is never read, and its
        answer costs what a missing id's does."""
        if not isinstance(task_id, str):
            raise InvalidInput("task_id must be a string")
        statements = self._statements
        if tenant is not None:
            row = (await conn.execute(statements.fetch_of_tenant,
                                      {"b_id": task_id, "b_tenant": tenant})).first()
        else:
            row = (await conn.execute(statements.fetch_locked if lock else statements.fetch,
                                      {"b_id": task_id})).first()
        return None if row is None else TaskRow.of(row)

    async def _save(
        self, conn: AsyncConnection, row: TaskRow, snapshot: Snapshot, token: str | None
    ) -> None:
        """Write ``snapshot`` over ``row``: ``UPDATE … WHERE id AND row_version`` (the row
        is locked, so this cannot miss; if it does, nothing is committed)."""
        await self._save_rows(conn, [(row.id, row.row_version, snapshot, token, None)])

    async def _save_rows(
        self,
        conn: AsyncConnection,
        rows: Sequence[tuple[str, int, Snapshot, str | None, str | None]],
    ) -> None:
        """Write each ``(id, row_version, snapshot, token, final_event)`` over its locked
        row, in one call (``final_event``: ``_codec.projection``).

        Raises:
            StoreUnavailable: a row changed under its lock; nothing is committed.
        """
        if not rows:
            return
        params = []
        for task_id, version, snapshot, token, final_event in rows:
            values = {"b_id": task_id, "b_version": version, "b_next": version + 1}
            projected = _codec.projection(snapshot, token, final_event)
            for name, value in projected.items():
                values["p_" + name] = value
            params.append(values)
            # (a rolled-back write leaves an entry no stored row matches: never taken)
            self.decoded.keep(task_id, _codec.stored_of(projected), snapshot)
        if len(params) == 1 or conn.dialect.supports_sane_multi_rowcount:
            written = (await conn.execute(self._statements.save, params)).rowcount
        else:  # (asyncpg counts no executemany: one statement per row)
            written = 0
            for values in params:
                written += (await conn.execute(self._statements.save, values)).rowcount
        if written != len(rows):
            raise StoreUnavailable("The task changed during the write; nothing was written")

    async def _record(self, conn: AsyncConnection, task_id: str, record: EventRecord) -> None:
        await conn.execute(sa.insert(self.tables.events).values(_codec.event_row(task_id, record)))

    async def _lock_counter(self, conn: AsyncConnection) -> int:
        """Lock the creators' row; its value, the count or ``UNCOUNTED``
        (:func:`~tasks_store_sql._counting.lock_count`).

        Raises:
            StoreError: the row is missing (a damaged schema).
        """
        return await lock_count(conn, self.tables, self._db.kind)

    async def _counted_total(self, conn: AsyncConnection) -> int | None:
        """Lock the creators' row: the stored tasks, or ``None`` while nothing is counted
        and this store sets no limit (:func:`~tasks_store_sql._counting.counted_total`).

        Raises:
            StoreError: the row is missing (a damaged schema).
        """
        return await counted_total(conn, self.tables, self._db.kind, self.limits)

    async def _scope_bound(self, conn: AsyncConnection, tenant: str) -> int | None:
        """The stored bound on ``tenant``'s active tasks (:mod:`tasks_store_sql._scopes`;
        the caller holds the creators' lock). On MariaDB a locking read: a plain one in
        a transaction at REPEATABLE READ (an application's own, for a create inside it)
        sees the rows as of its first read, before another creator's commit."""
        locks = self.tables.locks
        stmt = sa.select(locks.c.value).where(locks.c.name == scope_lock(tenant))
        if self._db.kind == "mysql":
            stmt = stmt.with_for_update()
        value = (await conn.execute(stmt)).scalar()
        return None if value is None else int(value)

    async def _keep_scope_bound(
        self, conn: AsyncConnection, tenant: str, room: Room, created: int = 1
    ) -> None:
        """Store ``tenant``'s bound after a create of ``created`` tasks
        (:class:`~tasks_store_sql._scopes.Room`): insert or replace its row, or raise the
        row there is by ``created``."""
        locks = self.tables.locks
        name = scope_lock(tenant)
        if room.bound is None:
            await conn.execute(sa.update(locks).where(locks.c.name == name)
                               .values(value=locks.c.value + created))
            return
        row = {"name": name, "value": room.bound}
        if self._db.kind == "mysql":
            upsert: Any = mysql.insert(locks).values(row)
            upsert = upsert.on_duplicate_key_update(value=upsert.inserted.value)
        else:
            dialect = postgresql if self._db.kind == "postgresql" else sqlite
            upsert = dialect.insert(locks).values(row)
            upsert = upsert.on_conflict_do_update(index_elements=[locks.c.name],
                                                  set_={"value": upsert.excluded.value})
        await conn.execute(upsert)

    async def _add_to_counter(self, conn: AsyncConnection, delta: int) -> None:
        """Add ``delta`` to the count, if there is one."""
        await conn.execute(add_to_count(self.tables, delta))

    async def _delete_tasks(self, conn: AsyncConnection, ids: Collection[str]) -> None:
        """Delete tasks with their history and members (caller holds the counter)."""
        if not ids:
            return
        t = self.tables
        ids = list(ids)
        await conn.execute(sa.delete(t.events).where(t.events.c.task_id.in_(ids)))
        await conn.execute(sa.delete(t.members).where(t.members.c.task_id.in_(ids)))
        await conn.execute(sa.delete(t.tasks).where(t.tasks.c.id.in_(ids)))
        await self._add_to_counter(conn, -len(ids))

    async def _notify(self, conn: AsyncConnection, queue: str) -> None:
        """Tell idle workers that ``queue`` may have work (PostgreSQL overrides)."""

    async def _notify_cancels(self, conn: AsyncConnection, task_ids: list[str]) -> None:
        """Tell cancel waiters that ``task_ids`` were cancelled (PostgreSQL overrides)."""

    async def aclose(self) -> None:
        """Dispose of the engine if the store created it (never one passed in)."""
        await self._db.dispose()


def sqlite_file(engine: AsyncEngine) -> str:
    """The resolved path of a SQLite engine's database file (the writer queue's key, the
    file a change watcher reads)."""
    return sqlite_path_of(engine.url)

