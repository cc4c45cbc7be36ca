"""What differs between SQLite, PostgreSQL and MariaDB/MySQL: engines and their settings.

A store's engine: SQLite in WAL with ``synchronous=FULL``, the driver's implicit
transactions off and ``BEGIN`` / ``BEGIN IMMEDIATE`` issued by the store; PostgreSQL and
MariaDB at READ COMMITTED. Connections are opened by the store's own ``do_connect``
(driver option values typed, the driver's refusals as ``InvalidInput``, an open with no
server answering in its connect timeout ``NoServer``, aiosqlite's failed opens cleaned up).
Also: the database's clock, and the server versions served (``SKIP LOCKED``). A missing
or unusable driver is ``InvalidInput`` saying what to install. URLs and their options:
:mod:`._url`, :mod:`._options`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool, StaticPool
from tasks_core.clock import utc
from tasks_core.errors import InvalidInput, StoreError
from tasks_core.plugins import install_hint

from tasks_store_sql._errors import NoServer, connect_arguments
from tasks_store_sql._options import driver_params
from tasks_store_sql._url import Kind, Target

__all__ = [
    "WRITE",
    "check_server_version",
    "create_engine",
    "install_connect",
    "install_sqlite_hooks",
    "kind_of",
    "loop_engine_factory",
    "prepare_sqlite_connection",
    "server_now",
    "sqlite_connect_args",
]

_EXTRAS = {"asyncmy": "mysql", "aiomysql": "aiomysql", "psycopg": "psycopg"}
"""The extra of tasks-store-sql that installs each optional driver."""


def kind_of(engine: AsyncEngine) -> Kind:
    """The family of database an engine talks to.

    Raises:
        InvalidInput: a dialect the SQL store does not serve.
    """
    name = engine.dialect.name
    if name == "sqlite":
        return "sqlite"
    if name == "postgresql":
        return "postgresql"
    if name in ("mysql", "mariadb"):
        return "mysql"
    raise InvalidInput(f"SQLStore serves SQLite, PostgreSQL and MariaDB/MySQL, not {name}")


WRITE = "tasks_write"
"""Execution option: the SQLite transaction about to begin will write (BEGIN IMMEDIATE)."""


def create_engine(
    target: Target, *, busy_timeout: float, options: Mapping[str, Any] | None = None,
    set_wal: bool = True,
) -> AsyncEngine:
    """An engine for ``target`` with the settings the store relies on.

    SQLite: WAL (set on a file unless ``set_wal`` is false: a store opened with
    ``create=False`` leaves a file's journal mode as it is — a store it made is in WAL
    already, another program's file must not change), ``synchronous=FULL``, the driver's
    implicit transactions off and ``BEGIN`` / ``BEGIN IMMEDIATE`` issued by us.
    PostgreSQL and MariaDB: READ COMMITTED.

    Raises:
        InvalidInput: the driver is not installed, or cannot work as installed (says
            what to install); ``options`` SQLAlchemy refuses (a pool size of NaN, a
            keyword it does not take).
    """
    kwargs: dict[str, Any] = dict(options or {})
    if target.kind == "sqlite":
        kwargs["connect_args"] = sqlite_connect_args(busy_timeout, options)
        if target.memory:
            kwargs["poolclass"] = StaticPool
    else:
        kwargs.setdefault("isolation_level", "READ COMMITTED")
        kwargs.setdefault("pool_size", 10)
        kwargs.setdefault("max_overflow", 20)
        if target.kind == "mysql":
            kwargs.setdefault("pool_recycle", 1800)
    driver = target.url.get_driver_name()
    try:
        if driver == "aiomysql":
            _check_aiomysql()
        engine = create_async_engine(target.url, **kwargs)
    except InvalidInput:
        raise  # the driver's own refusal, as it is (it is a ValueError too)
    except ImportError as exc:
        raise InvalidInput(f"The {driver} driver is not installed or cannot be imported: "
                           f"{_install_hint(driver)}") from exc
    except (TypeError, ValueError, OverflowError) as exc:  # SQLAlchemy's own checks
        raise InvalidInput(f"engine_options SQLAlchemy cannot take: {exc}") from None
    install_connect(engine)
    if target.kind == "sqlite":
        install_sqlite_hooks(engine, wal=set_wal and not target.memory)
    return engine


def _install_hint(driver: str) -> str:
    """How to install ``driver``: the extra of tasks-store-sql that brings it."""
    extra = _EXTRAS.get(driver)
    if extra is None:
        return f"pip install {driver}"
    return install_hint("tasks-store-sql", extra)


def _check_aiomysql() -> None:
    """Refuse a PyMySQL that aiomysql cannot use, before its first query would fail.

    aiomysql 0.3 escapes bytes with PyMySQL's ``escape_bytes_prefixed``, which PyMySQL
    1.2.1 removed (later releases keep the name, bound to a string).

    Raises:
        InvalidInput: the installed PyMySQL is one of those (says what to install).
        ImportError: PyMySQL is not installed.
    """
    converters = importlib.import_module("pymysql.converters")
    if not callable(getattr(converters, "escape_bytes_prefixed", None)):
        raise InvalidInput("aiomysql cannot work with the installed PyMySQL (1.2.1 or "
                           f"later): {_install_hint('aiomysql')}")


def install_connect(engine: AsyncEngine) -> None:
    """Open the engine's connections ourselves (``do_connect``): the URL's option text
    turned into the values the driver takes (:func:`driver_params`), the driver refusing
    its arguments as ``InvalidInput`` (:func:`~._errors.connect_arguments`), a MariaDB/MySQL
    open bounded as a whole (:func:`_open_mysql`), and an
    aiosqlite connection that fails to open leaving no thread behind
    (:func:`_open_aiosqlite`) or waiting on a stop its thread never serves
    (:func:`_stop_once`)."""
    driver = engine.dialect.driver
    what = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}.get(
        engine.dialect.name, "MariaDB/MySQL"
    )

    @event.listens_for(engine.sync_engine, "do_connect")
    def _connect(dialect: sa.Dialect, _record: Any, cargs: Any, cparams: Any) -> Any:
        params = driver_params(driver, dict(cparams))
        if driver == "aiosqlite" and "async_creator_fn" not in params:
            params["async_creator_fn"] = _open_aiosqlite
        elif driver in _MYSQL_DRIVERS and "async_creator_fn" not in params:
            params["async_creator_fn"] = functools.partial(_open_mysql, driver)
        with connect_arguments(what):
            try:
                return dialect.connect(*cargs, **params)
            except TimeoutError as exc:  # asyncpg's, ours (_open_mysql): never a query's
                raise NoServer(f"{what} did not answer within the connect timeout") from exc
            except ConnectionError as exc:  # asyncpg: not a PostgreSQL server ("SSL upgrade")
                if isinstance(exc, ConnectionRefusedError):
                    raise  # named as it is (_errors._UNREACHABLE)
                raise NoServer(f"no {what} server answered there") from exc


_MYSQL_DRIVERS = ("asyncmy", "aiomysql")

MYSQL_CONNECT_WAIT = 10
"""Seconds a MariaDB/MySQL connection may take to open when the URL gives no
``connect_timeout`` (asyncmy's own default)."""


async def _open_mysql(driver: str, *args: Any, **kwargs: Any) -> Any:
    """The MariaDB/MySQL driver's ``connect``, the whole of it bounded by its
    ``connect_timeout`` (else :data:`MYSQL_CONNECT_WAIT`): asyncmy and aiomysql bound only
    the TCP connect with it (aiomysql not at all by default), so a server that accepts and
    never answers — another program on the port, PostgreSQL's port in a ``mysql://`` URL —
    held the open forever. The driver's ``InternalError`` while connecting is an answer
    that is not MariaDB's (a wrong packet: another program on the port).

    Raises:
        TimeoutError: no answer in time.
        NoServer: an answer that is not MariaDB's; else what the driver raises.
    """
    errors = importlib.import_module("asyncmy.errors" if driver == "asyncmy" else "pymysql.err")
    limit = kwargs.get("connect_timeout") or MYSQL_CONNECT_WAIT
    try:
        async with asyncio.timeout(limit):
            return await importlib.import_module(driver).connect(*args, **kwargs)
    except errors.InternalError as exc:
        raise NoServer("no MariaDB/MySQL server answered there") from exc


async def _open_aiosqlite(*args: Any, **kwargs: Any) -> Any:
    """``aiosqlite.connect``, waiting for the connection's thread to end when it fails.

    aiosqlite stops the thread of a connection that failed to open without waiting for
    it; the thread then reports to the event loop, and if ``asyncio.run`` closed the loop
    first, it dies printing "RuntimeError: Event loop is closed"."""
    import aiosqlite  # type: ignore[import-untyped,unused-ignore]

    connection = aiosqlite.connect(*args, **kwargs)
    worker = getattr(connection, "_thread", None)
    if isinstance(worker, threading.Thread):
        worker.daemon = True  # as SQLAlchemy's own aiosqlite connect does
    _stop_once(connection)
    try:
        return await connection
    except BaseException:
        if isinstance(worker, threading.Thread) and worker.is_alive():
            with contextlib.suppress(Exception):
                # Joined from the loop's executor, without blocking the loop: the worker
                # may still be running the connector (a cancelled open), and it ends by
                # handing its last result to this loop, which is still running.
                await asyncio.to_thread(worker.join)
        raise


def _stop_once(connection: Any) -> None:
    """Make every ``stop()`` of an aiosqlite connection after the first return the first
    one's future instead of queueing another stop.

    The connection's thread serves one stop and ends; a stop queued after it is never
    served, and its future never completes. Two stops meet when a cancel interrupts the
    graceful close SQLAlchemy's ``terminate`` runs in a shielded task: ``terminate``
    stops the connection, and the close, still running, stops it again in its
    ``finally`` and waits for that stop. Cancelled while closing (as ``asyncio.run``
    cancels what is left at exit, once), the close has spent its cancel and waits
    forever, and so does ``asyncio.run``. (aiosqlite without ``stop()`` is never
    terminated by SQLAlchemy: nothing to do.)"""
    stop = getattr(connection, "stop", None)
    if stop is None:
        return
    stops: list[Any] = []

    def stop_once() -> Any:
        if not stops:
            stops.append(stop())
        return stops[0]

    connection.stop = stop_once


def loop_engine_factory(
    target: Target, options: Mapping[str, Any] | None = None
) -> Callable[[], AsyncEngine] | None:
    """Makes pool-less engines for event loops other than the store's first one
    (``None`` for SQLite, whose driver is loop-agnostic)."""
    if target.kind == "sqlite":
        return None
    kwargs: dict[str, Any] = {
        k: v
        for k, v in (options or {}).items()
        if k not in ("pool_size", "max_overflow", "pool_recycle", "pool_timeout", "poolclass")
    }
    kwargs.setdefault("isolation_level", "READ COMMITTED")

    def make() -> AsyncEngine:
        engine = create_async_engine(target.url, poolclass=NullPool, **kwargs)
        install_connect(engine)
        return engine

    return make


def sqlite_connect_args(
    busy_timeout: float, options: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The keyword arguments of ``sqlite3.connect`` the store adds to the URL's: the
    ``busy_timeout`` (how long the pragmas of :func:`prepare_sqlite_connection` may wait),
    then the application's ``engine_options["connect_args"]``.

    Raises:
        InvalidInput: ``connect_args`` naming ``timeout``: the store's ``busy_timeout``
            is that wait (checked as every duration is), as for the URL's ``?timeout=``.
    """
    given = dict((options or {}).get("connect_args", {}))
    if "timeout" in given:
        raise InvalidInput("engine_options connect_args 'timeout': use the busy_timeout "
                           "option")
    return {"timeout": busy_timeout, **given}


def prepare_sqlite_connection(dbapi_connection: Any, *, wal: bool) -> None:
    """Set a new SQLite connection (``sqlite3``'s, or the driver's adapter of it) up as
    the store relies on: transaction control taken from the sqlite3 module (the store
    issues ``BEGIN``/``BEGIN IMMEDIATE``), WAL (on a file), ``synchronous=FULL``, and from
    then on "busy" answered at once (``busy_timeout = 0``): the store waits for the lock
    itself, in short tries (``Database.when_free``); the pragmas here still waited."""
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        if wal:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA busy_timeout = 0")
    finally:
        cursor.close()


def install_sqlite_hooks(engine: AsyncEngine, *, wal: bool) -> None:
    """Take transaction control away from the sqlite3 module (it begins lazily and
    deferred) so every write transaction starts with ``BEGIN IMMEDIATE``."""

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        prepare_sqlite_connection(dbapi_connection, wal=wal)

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        immediate = conn.get_execution_options().get(WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


_NOW_SQL: dict[Kind, str] = {
    "postgresql": "SELECT clock_timestamp()",
    "mysql": "SELECT UTC_TIMESTAMP(6)",
    "sqlite": "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')",
}


async def server_now(conn: AsyncConnection, kind: Kind) -> datetime:
    """The database's clock, read on ``conn`` now (aware UTC)."""
    value = (await conn.exec_driver_sql(_NOW_SQL[kind])).scalar_one()
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise TypeError(f"the database clock returned {type(value).__name__}")
    return utc(value)


def check_server_version(dialect: sa.Dialect) -> None:
    """Refuse servers without ``SKIP LOCKED`` (MariaDB before 10.6, MySQL before 8.0).

    Raises:
        StoreError: naming the version needed.
    """
    if dialect.name not in ("mysql", "mariadb"):
        return
    version = tuple(v for v in (dialect.server_version_info or ()) if isinstance(v, int))
    mariadb = bool(getattr(dialect, "is_mariadb", False))
    needed = (10, 6) if mariadb else (8, 0)
    if version and version[:2] < needed:
        name = "MariaDB" if mariadb else "MySQL"
        raise StoreError(
            f"SQLStore needs {name} {needed[0]}.{needed[1]} or later (FOR UPDATE SKIP "
            f"LOCKED); this server is {'.'.join(map(str, version))}"
        )
