"""Running the shipped Alembic migrations on one namespace, and checking its schema.

A namespace is migrated under a lock, so that processes starting together never race on
DDL: a transaction-scoped advisory lock on PostgreSQL (whose DDL is transactional), a
named lock (``GET_LOCK``) on MariaDB/MySQL, the write lock (``BEGIN IMMEDIATE``) on SQLite.
Opening decides under that lock too (:func:`ready_schema`): whether to create or upgrade,
and — on MariaDB/MySQL, whose DDL commits statement by statement — even what it reads.
There a migration holds a marker table while it runs: one left behind (a migration cut
short) marks the namespace as between two revisions, refused until restored, or dropped
whole by ``--to base``. A migration logs one INFO line of the store's; Alembic's own INFO
lines of it are dropped unless the ``alembic`` logger has a level of its own
(:class:`_QuietAlembic`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Literal

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core.errors import InvalidInput, SchemaMismatch, StoreUnavailable

from tasks_store_sql._db import Database
from tasks_store_sql._errors import translate
from tasks_store_sql._opening import SchemaMode
from tasks_store_sql._schema import Tables

__all__ = [
    "SchemaMismatch",
    "SchemaState",
    "drop_every_table",
    "head",
    "migrate_database",
    "ready_schema",
    "revisions",
    "schema_state",
]

SchemaState = Literal["empty", "current", "older", "newer", "foreign", "interrupted"]
LOCK_TIMEOUT_S = 60
"""How long a MariaDB/MySQL migrator or opener waits for the namespace's lock."""
MIGRATES: dict[SchemaMode, tuple[SchemaState, ...]] = {
    "create": ("empty",), "upgrade": ("empty", "older"), "check": ()}
"""The states an opening in each schema mode migrates to the head revision."""
Look = Callable[[AsyncConnection], Awaitable[tuple[SchemaState, str | None]]]
log = logging.getLogger("tasks_store_sql")


class _QuietAlembic(logging.Filter):
    """Drops Alembic's records below WARNING logged on a thread while it runs one of this
    module's migrations (a first open logged ~40 lines into an application at INFO),
    unless the user gave the ``alembic`` logger a level of its own."""

    running = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return (record.levelno >= logging.WARNING
                or not getattr(self.running, "on", False)
                or logging.getLogger("alembic").level != logging.NOTSET)


for _name in ("alembic.runtime.migration", "alembic.runtime.plugins"):
    logging.getLogger(_name).addFilter(_QuietAlembic())


@contextmanager
def _alembic_quiet() -> Iterator[None]:
    """Alembic's INFO records dropped on this thread meanwhile (:class:`_QuietAlembic`)."""
    before = getattr(_QuietAlembic.running, "on", False)
    _QuietAlembic.running.on = True
    try:
        yield
    finally:
        _QuietAlembic.running.on = before


@functools.cache
def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", "tasks_store_sql:migrations")
    return config


@functools.cache
def revisions() -> tuple[str, ...]:
    """Every shipped revision, oldest first."""
    walked = [rev.revision for rev in _script().walk_revisions("base", "heads")]
    return tuple(reversed(walked))


def head() -> str:
    """The revision this version of the code expects."""
    return revisions()[-1]


def _current(sync_conn: sa.Connection, tables: Tables) -> str | None:
    with _alembic_quiet():
        context = MigrationContext.configure(sync_conn,
                                             opts={"version_table": tables.version_table})
        return context.get_current_revision()


def _marker(tables: Tables) -> sa.Table:
    """The table a MariaDB/MySQL migration holds while it runs: from and to which revision
    (``NULL``: no schema)."""
    return sa.Table(tables.migrating_table, sa.MetaData(),
                    sa.Column("from_revision", sa.String(32)),
                    sa.Column("to_revision", sa.String(32)))


def _ddl_commits(sync_conn: sa.Connection) -> bool:
    """Whether each DDL statement commits on its own (MariaDB/MySQL): a migration cut short
    there leaves its namespace between two revisions."""
    return sync_conn.dialect.name in ("mysql", "mariadb")


def _stopped(sync_conn: sa.Connection, tables: Tables) -> str | None:
    """``"FROM to TO"`` of a migration that stopped part way, its marker left behind
    (``None``: none did)."""
    marker = _marker(tables)
    if not sa.inspect(sync_conn).has_table(marker.name):
        return None
    row = sync_conn.execute(sa.select(marker.c.from_revision, marker.c.to_revision)).first()
    start, goal = (None, None) if row is None else row
    return f"{start or 'nothing'} to {goal or 'nothing'}"


def _state(sync_conn: sa.Connection, tables: Tables) -> tuple[SchemaState, str | None]:
    stopped = _stopped(sync_conn, tables) if _ddl_commits(sync_conn) else None
    if stopped is not None:  # "interrupted": the revision's place says between which
        return "interrupted", stopped
    current = _current(sync_conn, tables)
    if current is None:  # "foreign": the revision's place names the tables found
        inspector = sa.inspect(sync_conn)
        found = [name for name in tables.names  # (an empty version table is Alembic's)
                 if name != tables.version_table and inspector.has_table(name)]
        return ("foreign", ", ".join(found)) if found else ("empty", None)
    if current == head():
        return "current", current
    if current in revisions():
        return "older", current
    return "newer", current


async def schema_state(conn: AsyncConnection, tables: Tables) -> tuple[SchemaState, str | None]:
    """Where the namespace's schema stands, and its revision (``"foreign"``: no revision,
    but tables of the store's names — those names; ``"interrupted"``: ``FROM to TO`` of
    the migration cut short)."""
    return await conn.run_sync(_state, tables)


def _run(sync_conn: sa.Connection, tables: Tables, target: str) -> None:
    state, current = _state(sync_conn, tables)
    if state == "interrupted" and target == "base":  # the marker proves them the store's
        drop_every_table(sync_conn, tables)
        return
    if state in ("foreign", "interrupted"):  # never create beside another's tables
        raise mismatch(tables, state, current)
    config = _config()
    config.attributes["connection"] = sync_conn
    config.attributes["prefix"] = tables.prefix
    order = {rev: i for i, rev in enumerate(revisions())}
    position = -1 if current is None else order.get(current)
    goal = -1 if target == "base" else order[target]
    if position is None:
        raise _newer(tables, current)
    marker = _marker(tables) if _ddl_commits(sync_conn) and goal != position else None
    if marker is not None:
        marker.create(sync_conn)
        sync_conn.execute(marker.insert().values(
            from_revision=current, to_revision=None if target == "base" else target))
    with _alembic_quiet():
        if goal >= position:
            command.upgrade(config, target)
        else:
            command.downgrade(config, target)
    log.info("tasks schema of namespace %s migrated from %s to %s",
             tables.prefix.rstrip("_") or "(default)", current or "nothing", target)
    if target == "base":  # nothing: Alembic leaves its (empty) version table behind
        sa.Table(tables.version_table, sa.MetaData()).drop(sync_conn, checkfirst=True)
    if marker is not None:
        marker.drop(sync_conn)


def drop_every_table(sync_conn: sa.Connection, tables: Tables) -> None:
    """Drop every table of the namespace there is, whatever its revision, the marker of a
    migration cut short included."""
    for name in [*tables.names, tables.migrating_table]:
        sa.Table(name, sa.MetaData()).drop(sync_conn, checkfirst=True)


def _newer(tables: Tables, current: str | None) -> SchemaMismatch:
    return SchemaMismatch(
        f"The schema of namespace {tables.prefix.rstrip('_') or '(default)'} is at revision "
        f"{current!r}, which this tasks-store-sql does not know (it ships up to {head()!r}): "
        "upgrade tasks-store-sql"
    )


def mismatch(tables: Tables, state: SchemaState, current: str | None) -> SchemaMismatch:
    """The error that refuses to open a namespace in ``state``."""
    where = tables.prefix.rstrip("_") or "(default)"
    if state == "newer":
        return _newer(tables, current)
    if state == "older":
        return SchemaMismatch(
            f"The schema of namespace {where} is at revision {current!r}, older than this "
            f"tasks-store-sql expects ({head()!r}): run `tasks migrate --store URL`, "
            "tasks_store_sql.migrate(url) or open with schema='upgrade'"
        )
    if state == "interrupted":
        return SchemaMismatch(
            f"A migration of namespace {where} from {current} stopped part way: "
            "MariaDB/MySQL commit each DDL statement on its own, so its tables may lie "
            "between those revisions. If it failed at its first statement (a right the "
            "login lacked, say), nothing changed: drop table "
            f"{tables.migrating_table} and migrate again. Else restore the database from "
            "a backup taken before it and migrate again, or start the namespace afresh, "
            "its tasks lost: `tasks migrate --to base`, then `tasks migrate`"
        )
    if state == "foreign":
        return SchemaMismatch(
            f"Namespace {where} holds tables named as this store's ({current}) without a "
            "tasks schema version: they are not a tasks store, or its version table was "
            "dropped; give the store a namespace of its own (?namespace=NAME in the URL)"
        )
    return SchemaMismatch(
        f"Namespace {where} has no tasks schema yet: run `tasks migrate --store URL`, "
        "tasks_store_sql.migrate(url) or open with schema='create'"
    )


async def ready_schema(db: Database, tables: Tables, mode: SchemaMode, look: Look) -> None:
    """Leave the namespace at the current schema, creating or upgrading it as ``mode``
    allows (:data:`MIGRATES`), or refuse it. ``look`` reads the state on a connection.

    The rule: a look without the lock may only accept a current schema; any other state
    is looked at again, and acted on, under the migration lock — an opener that waited
    there for another's migration then finds the schema current. PostgreSQL and SQLite
    (transactional DDL) show no schema or a whole one, so a look without the lock refuses
    as well. MariaDB/MySQL commit DDL statement by statement, and reading a table's
    definition while another session alters it fails (error 1684): there even the look
    takes the lock.

    Raises:
        SchemaMismatch: a state ``mode`` does not migrate (see :func:`mismatch`).
        StoreUnavailable: the database is unavailable, or the lock was not had in time.
        InvalidInput: from ``look`` (a server version the store does not support).
    """
    migrates = MIGRATES[mode]
    if db.kind != "mysql":
        async with db.connection(write=False) as conn:
            state, current = await look(conn)
        if state == "current":
            return
        if state not in migrates:
            raise mismatch(tables, state, current)
    async with _locked(db, tables) as conn:
        state, current = await look(conn)
        if state in migrates:
            await conn.run_sync(_run, tables, head())
            state, current = await look(conn)
    if state != "current":
        raise mismatch(tables, state, current)


def _lock_key(tables: Tables) -> int:
    return zlib.crc32(f"tasks-migrate:{tables.prefix}".encode()) - 2**31


def _lock_name(database: str | None, tables: Tables) -> str:
    """The MariaDB/MySQL lock name: ``GET_LOCK`` names are server-wide (PostgreSQL's
    advisory locks are per database), so it names the database and the namespace, within
    the 64 characters allowed (a long database name is hashed)."""
    name = f"tasks-migrate:{database or ''}:{tables.prefix}"
    if len(name) <= 64:
        return name
    digest = hashlib.sha256((database or "").encode()).hexdigest()[:16]
    return f"tasks-migrate:{digest}:{tables.prefix}"


async def migrate_database(db: Database, tables: Tables, target: str = "head") -> str | None:
    """Move the namespace to ``target`` (``"head"``, a revision, or ``"base"``: nothing),
    up or down, under the migration lock. Returns the revision it was at before.

    Raises:
        InvalidInput: an unknown target revision.
        SchemaMismatch: the namespace is at a revision this code does not know.
        StoreUnavailable: the lock or the database is unavailable.
    """
    target = head() if target == "head" else target
    if target != "base" and target not in revisions():
        raise InvalidInput(f"Unknown schema revision {target!r}; known: {', '.join(revisions())}")
    async with _locked(db, tables) as conn:
        before = await conn.run_sync(_current, tables)
        await conn.run_sync(_run, tables, target)
    return before


@asynccontextmanager
async def _locked(db: Database, tables: Tables) -> AsyncIterator[AsyncConnection]:
    """A connection in a transaction, holding the namespace's migration lock until that
    transaction has committed (or rolled back). PostgreSQL: a transaction-scoped advisory
    lock, released by the commit itself. MariaDB/MySQL: ``GET_LOCK``, held by the session,
    not the transaction, so taken before the transaction begins and released after it
    ended, on the same connection (released before the commit, it let another migrator
    read the old revision and run the same DDL again). SQLite: its write lock.

    Raises:
        StoreUnavailable: the database is unavailable, or another session held the lock
            for ``LOCK_TIMEOUT_S`` (MariaDB/MySQL).
    """
    if db.kind != "mysql":
        async with db.connection(write=True) as conn:
            if db.kind == "postgresql":
                await conn.execute(
                    sa.select(sa.func.pg_advisory_xact_lock(_lock_key(tables))))
            yield conn
        return
    with translate(db.what):
        async with db.current().connect() as conn:
            database = (await conn.execute(sa.select(sa.func.database()))).scalar()
            name = _lock_name(database, tables)
            got = (await conn.execute(
                sa.select(sa.func.get_lock(name, LOCK_TIMEOUT_S)))).scalar()
            await conn.commit()  # ends the transaction the statement began, not the lock
            if got != 1:
                raise StoreUnavailable(
                    f"Another session has held the schema lock {name!r} of namespace "
                    f"{tables.prefix.rstrip('_') or '(default)'} for {LOCK_TIMEOUT_S} s "
                    "(a migration still running, or stuck): try again once it is done, "
                    f"or end the session holding it (SELECT IS_USED_LOCK('{name}') "
                    "gives its id)")
            try:
                async with conn.begin():
                    yield conn
            finally:
                await conn.execute(sa.select(sa.func.release_lock(name)))
