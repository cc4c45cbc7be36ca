"""``SQLStore``: the ``TaskStore`` on SQLAlchemy 2's asyncio Core — SQLite (the embedded
default), PostgreSQL and MariaDB/MySQL — and ``create`` on the SQL path.

``SQLStore(url)`` and ``SQLStore(engine=…)`` give a
:class:`~tasks_store_sql.postgres.PostgresStore` for PostgreSQL on asyncpg (its own
statements on the hot path) and a :class:`~tasks_store_sql.sqlite.SQLiteStore` for a
SQLite file by URL (fresh creates on a writer connection of its own); every other
database runs the SQL path here and in the modules it inherits. Every operation is one
transaction; creators serialize on the creators' lock row, which counts the stored
tasks, so both capacity limits hold under concurrent creators. The reference
(capabilities, URLs, options) is :class:`SQLStore`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from tasks_core import rules, storekit
from tasks_core.errors import CapacityExceeded, InvalidInput, TaskExists, TaskNotFound
from tasks_core.models import NewTask, Snapshot, StoreCapabilities

from tasks_store_sql import _codec
from tasks_store_sql._base import TaskRow
from tasks_store_sql._bulk import BulkCreates
from tasks_store_sql._open_creates import refuse_open, remember
from tasks_store_sql._options import check_store_options
from tasks_store_sql._schema import active
from tasks_store_sql._scopes import Room, room_for_one
from tasks_store_sql._writers import WriterQueue

__all__ = ["SQLStore"]

CREATOR_WAIT = 30.0
"""Seconds a create waits for its turn among this store's creators (as long as a pool
checkout may wait) before it fails with ``StoreUnavailable``, nothing written."""


class SQLStore(BulkCreates):
    """The SQL store. Create with a URL or an engine; nothing touches the database until
    the first operation (or :meth:`open`). PostgreSQL on asyncpg gives the subclass
    :class:`~tasks_store_sql.postgres.PostgresStore`, a SQLite file by URL
    :class:`~tasks_store_sql.sqlite.SQLiteStore`.

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
    queue_limits       yes          yes         yes            yes
    batch_transitions  yes          yes         yes            yes
    batch_create       yes          yes         yes (a few     yes
                                                statements)
    transactional_     yes          yes         yes            yes
    submit
    counts             yes (index)  yes         yes (index-    yes (index)
                                                only scan)
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
    schema) or ``"check"`` (never runs DDL); ``create=False`` (the stores' standard option:
    create nothing — ``"check"`` whatever ``schema`` says, and a SQLite file that does not
    exist is refused with ``UnknownStore``); ``busy_timeout`` (seconds a SQLite writer waits
    for its turn in this process, and then for the file's lock, default 5);
    ``engine_options`` (passed to ``create_async_engine``).

    Atomicity: every operation is one transaction. Operations on one task lock its row
    (``SELECT … FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE`` serializes writers instead), read
    the clock after the lock is held (``clock_timestamp()``, ``UTC_TIMESTAMP(6)``, SQLite
    ``strftime('now')``, or the injected ``clock``), apply :mod:`tasks_core.rules` and write
    back with ``UPDATE … WHERE id AND row_version`` plus the event insert. ``transition`` is
    ``transition_many`` of one item: several transitions share one transaction and one commit
    (group commit), each still guarded by its own revision and lease. On PostgreSQL with
    asyncpg the store is a :class:`~tasks_store_sql.postgres.PostgresStore`, whose hot path
    (claims, transitions, renew, release, progress, creates) runs prebuilt statements on
    the driver connection.
    Creators serialize on one lock row that also counts the stored tasks, so both capacity
    limits hold under concurrent creators. ``claim_next`` never waits for another claimer
    (``FOR UPDATE SKIP LOCKED``).
    """

    CAPABILITIES = StoreCapabilities(
        durable=True,
        multi_process=True,
        wakeups=True,
        exclusive_queues=True,
        queue_limits=True,
        batch_transitions=True,
        transactional_submit=True,
        cancel_wakeups=True,
        batch_create=True,
        counts=True,
    )
    """The most any URL gets (PostgreSQL); an instance reports its own."""

    _served: ClassVar[list[tuple[Callable[[object, object], bool], type[SQLStore]]]] = []
    """The subclasses ``SQLStore(...)`` gives, each with the test of the URL or engine it
    serves: ``PostgresStore`` (PostgreSQL on asyncpg) and ``SQLiteStore`` (a SQLite file
    by URL), which declare themselves with ``serves=`` (the package imports both, so they
    are known before any call)."""

    def __init_subclass__(
        cls, *, serves: Callable[[object, object], bool] | None = None, **kwargs: Any
    ) -> None:
        """``class …(SQLStore, serves=test)``: the class ``SQLStore(url)`` or
        ``SQLStore(engine=…)`` gives when ``test(url, engine)`` holds (so this module
        imports neither subclass)."""
        super().__init_subclass__(**kwargs)
        if serves is not None:
            SQLStore._served.append((serves, cls))

    def __new__(cls, url: str | None = None, **options: Any) -> SQLStore:
        """The class the URL or engine calls for (``_served``), else ``cls`` (whose
        ``__init__`` checks the arguments)."""
        if cls is SQLStore:
            engine = options.get("engine")
            cls = next((sub for serves, sub in SQLStore._served if serves(url, engine)), cls)
        return super().__new__(cls)

    def __init__(self, url: str | None = None, **options: Any) -> None:
        """Create a store; see the class docstring for URLs and options.

        Raises:
            InvalidInput: a bad URL or option (an unknown one named), or a driver that is
                not installed.
        """
        check_store_options(options)
        super().__init__(url, **options)
        self._creators = None if self._db.kind == "sqlite" else WriterQueue(
            busy="Too many concurrent creates in this process: no turn"
        )
        """The FIFO of this store's creators in front of the creators' lock row (SQLite:
        its writer queue already serializes every write)."""

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
            Unavailable: ``replace`` names a live task; or, without ``transaction``, the
                running code created ``new.id`` in a transaction still open
                (:mod:`._open_creates`).
            TaskNotFound: ``replace`` names no task.
            CapacityExceeded: a capacity limit; nothing stored.
            InvalidInput: ``transaction`` is not an ``AsyncConnection`` inside a
                transaction (:func:`_in_transaction`); nothing written.
            SchemaMismatch: ``transaction`` given, and the namespace's schema is not the
                current one (open the store, or migrate, first).
            StoreCorrupt: the existing record fails validation.
            StoreUnavailable: transient failure; nothing stored.
        """
        if not isinstance(new, NewTask):
            raise InvalidInput("create() takes a NewTask")
        if transaction is not None:
            await self._check_ready_on(_in_transaction(transaction, self.engine))
            created = await self._create(new, replace, transaction)
            remember(transaction, [new.id])
            return created
        refuse_open([new.id])
        await self._ensure_ready()
        return await self._create_own(new, replace)

    async def create_many(
        self, news: Sequence[NewTask], *, transaction: AsyncConnection | None = None
    ) -> list[Snapshot]:
        """Store every task of ``news`` at one instant in one transaction, or none (see
        ``TaskStore.create_many``); ``transaction`` as for :meth:`create`.

        Raises:
            InvalidInput: a bad batch; ``transaction`` as for :meth:`create`.
            TaskExists, CapacityExceeded: nothing stored.
            Unavailable: as for :meth:`create`, for any id of the batch.
            SchemaMismatch: as for :meth:`create`.
            StoreCorrupt: a row holding one of the ids fails validation.
            StoreUnavailable: transient failure; nothing stored.
        """
        batch = storekit.check_create_many(news)
        if transaction is not None:
            await self._check_ready_on(_in_transaction(transaction, self.engine))
            created = await self._create_batch(batch, transaction) if batch else []
            remember(transaction, [new.id for new in batch])
            return created
        refuse_open([new.id for new in batch])
        await self._ensure_ready()
        if not batch:
            return []
        async with self._creator_turn():
            return await self._create_batch(batch, None)

    async def _create_own(self, new: NewTask, replace: Snapshot | None) -> Snapshot:
        """``create`` in a transaction of the store's own, in the creators' turn
        (PostgreSQL overrides)."""
        async with self._creator_turn():
            return await self._create(new, replace, None)

    @contextlib.asynccontextmanager
    async def _creator_turn(self) -> AsyncIterator[None]:
        """This store's turn among its creators (SQLite: its writer queue serializes
        writes already).

        Raises:
            StoreUnavailable: no turn within :data:`CREATOR_WAIT` seconds.
        """
        if self._creators is None:
            yield
            return
        async with self._creators.slot(CREATOR_WAIT):
            yield

    async def _create(
        self, new: NewTask, replace: Snapshot | None, connection: AsyncConnection | None
    ) -> Snapshot:
        async def op(conn: AsyncConnection) -> Snapshot:
            total = await self._counted_total(conn)
            now = await self._now(conn)
            row = await self._fetch(conn, new.id, lock=True)
            current = row.decode() if row is not None else None
            if replace is None and current is not None:
                raise TaskExists(rules.present(current, now))
            if replace is not None:
                if current is None:
                    raise TaskNotFound(new.id)
                rules.check_replace(current, replace, now)
            room = None if total is None else await self._room(conn, new, row, total, now)
            snapshot = rules.new_snapshot(new, now, replace=current)
            if not await self._put_new(conn, row, snapshot, counted=total is not None):
                taken = await self._fetch(conn, new.id, lock=True)  # created since it was read
                assert taken is not None
                raise TaskExists(rules.present(taken.decode(), now))
            if room is not None:
                await self._keep_scope_bound(conn, new.tenant, room)
            await self._notify(conn, snapshot.queue)
            return snapshot

        return await self._db.run(op, write=True, connection=connection)

    async def _room(
        self, conn: AsyncConnection, new: NewTask, row: TaskRow | None, total: int,
        now: datetime,
    ) -> Room:
        """The room for ``new`` (replacing ``row``, if any) among ``total`` stored tasks,
        the creators' row held.

        Raises:
            CapacityExceeded: ``max_tasks`` or ``max_active_tasks_per_scope``.
        """
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
        return room

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
        self, conn: AsyncConnection, row: TaskRow | None, snapshot: Snapshot, *,
        counted: bool,
    ) -> bool:
        """Insert ``snapshot`` (or write it over ``row``, the run it replaces) with its
        members, adding it to the count when ``counted``; ``False``, nothing written, when
        its id was taken since it was read (``_insert_new``)."""
        t = self.tables
        if row is None:
            if not await self._insert_new(conn, [snapshot], counted=counted):
                return False
            if counted:
                await self._add_to_counter(conn, 1)
        else:
            await conn.execute(sa.delete(t.events).where(t.events.c.task_id == snapshot.id))
            await conn.execute(sa.delete(t.members).where(t.members.c.task_id == snapshot.id))
            await self._save(conn, row, snapshot, None)
        members = _codec.member_rows(snapshot)
        if members:
            await conn.execute(sa.insert(t.members), members)
        return True


def _in_transaction(transaction: object, engine: AsyncEngine) -> AsyncConnection:
    """The application's ``transaction=``: an ``AsyncConnection`` to the database of the
    store's ``engine``, inside a transaction it began. Checked before any statement runs
    on it: one on a connection outside a transaction would autobegin one, and the task
    vanish with it when the application's block ends without a commit; one to another
    database failed as an outage to retry.

    Raises:
        InvalidInput: not an ``AsyncConnection``; a closed one; one to another database
            (another kind, another database name, another SQLite file); one not in a
            transaction.
    """
    if not isinstance(transaction, AsyncConnection):
        hint = (" (a sync Connection cannot be: the store runs on asyncio drivers; use an "
                "AsyncEngine of the same database)"
                if isinstance(transaction, sa.Connection) else
                " (of an AsyncSession: await session.connection())"
                if isinstance(transaction, AsyncSession) else "")
        raise InvalidInput("transaction must be the SQLAlchemy AsyncConnection your "
                           f"transaction runs on{hint}")
    if transaction.closed:
        raise InvalidInput("transaction= takes an open connection; this one is closed")
    if not _same_database(transaction.engine, engine):
        raise InvalidInput("transaction= is a connection to another database than this "
                           f"store's ({transaction.dialect.name} "
                           f"{transaction.engine.url.database!r}, not {engine.dialect.name} "
                           f"{engine.url.database!r})")
    if not transaction.in_transaction():
        raise InvalidInput("transaction= takes a connection inside a transaction: async with "
                           "conn.begin(): ... (this one has not begun one)")
    return transaction


def _same_database(one: AsyncEngine, other: AsyncEngine) -> bool:
    """Whether two engines may reach the same database: the same kind and, where both URLs
    name one, the same database (a SQLite file by its resolved path). The host is left out
    (it may be spelt several ways), and so is a database one URL leaves to the server's
    default."""
    if one.dialect.name != other.dialect.name:
        return False
    names = [_database_name(engine) for engine in (one, other)]
    return None in names or names[0] == names[1]


def _database_name(engine: AsyncEngine) -> str | None:
    """The database ``engine``'s URL names (``None``: none; a SQLite file's resolved
    path)."""
    name = engine.url.database or None
    if name is not None and engine.dialect.name == "sqlite" and name != ":memory:":
        return os.path.realpath(name)
    return name
