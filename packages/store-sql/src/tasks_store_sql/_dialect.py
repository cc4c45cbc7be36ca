"""URLs, engines and what differs between SQLite, PostgreSQL and MariaDB/MySQL.

Plain schemes map to the asyncio drivers: ``sqlite://`` -> aiosqlite, ``postgresql://`` and
``postgres://`` -> asyncpg, ``mysql://`` and ``mariadb://`` -> asyncmy. An explicit
driver (``postgresql+psycopg://``, ``mysql+asyncmy://``…) is kept when it is an asyncio
driver. The query parameter ``namespace`` is ours and never reaches the driver.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool, StaticPool
from tasks_core.clock import utc
from tasks_core.errors import InvalidInput, StoreError

__all__ = [
    "Kind",
    "Target",
    "check_server_version",
    "create_engine",
    "kind_of",
    "loop_engine_factory",
    "parse_url",
    "server_now",
]

Kind = Literal["sqlite", "postgresql", "mysql"]

_DRIVERS: dict[str, tuple[Kind, str, frozenset[str]]] = {
    "sqlite": ("sqlite", "aiosqlite", frozenset({"aiosqlite"})),
    "postgresql": ("postgresql", "asyncpg", frozenset({"asyncpg", "psycopg", "psycopg_async"})),
    "postgres": ("postgresql", "asyncpg", frozenset({"asyncpg", "psycopg", "psycopg_async"})),
    "mysql": ("mysql", "asyncmy", frozenset({"aiomysql", "asyncmy"})),
    "mariadb": ("mysql", "asyncmy", frozenset({"aiomysql", "asyncmy"})),
}
_INSTALL = {
    "asyncmy": "pip install 'tasks-store-sql[mysql]'",
    "aiomysql": "pip install aiomysql",
    "psycopg": "pip install 'tasks-store-sql[psycopg]'",
}
URL_HELP = (
    "SQL store URLs look like 'sqlite:///path/tasks.db', "
    "'postgresql://user:password@host:5432/db' or 'mysql://user:password@host:3306/db'"
)


@dataclass(frozen=True)
class Target:
    """A parsed store URL.

    Attributes:
        url: the SQLAlchemy URL with an asyncio driver.
        kind: which family of database.
        memory: an in-memory SQLite database (one connection, not durable).
        namespace: the ``?namespace=`` parameter, if any.
    """

    url: URL
    kind: Kind
    memory: bool
    namespace: str | None

    @property
    def sqlite_path(self) -> str | None:
        """The resolved file of a SQLite database (``None`` in memory)."""
        if self.kind != "sqlite" or self.memory or not self.url.database:
            return None
        return os.path.realpath(self.url.database)


def parse_url(url: str) -> Target:
    """Parse a store URL (see the module docstring).

    Raises:
        InvalidInput: not a URL an SQL store serves.
    """
    if not isinstance(url, str) or "://" not in url:
        raise InvalidInput(URL_HELP)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InvalidInput(URL_HELP) from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend not in _DRIVERS:
        raise InvalidInput(f"{URL_HELP} (got scheme {backend!r})")
    kind, default_driver, allowed = _DRIVERS[backend]
    driver = driver or default_driver
    if driver not in allowed:
        raise InvalidInput(
            f"{driver!r} is not an asyncio driver for {backend}; use one of "
            + ", ".join(sorted(allowed))
        )
    query = dict(parsed.query)
    raw_namespace = query.pop("namespace", None)
    namespace = raw_namespace if isinstance(raw_namespace, str) else None
    name = "mariadb" if backend == "mariadb" else "postgresql" if kind == "postgresql" else kind
    parsed = parsed.set(drivername=f"{name}+{driver}", query=query)
    memory = kind == "sqlite" and parsed.database in (None, "", ":memory:")
    if kind == "mysql" and "charset" not in query:
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return Target(parsed, kind, memory, namespace)


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
    target: Target, *, busy_timeout: float, options: Mapping[str, Any] | None = None
) -> AsyncEngine:
    """An engine for ``target`` with the settings the store relies on.

    SQLite: WAL, ``synchronous=FULL``, the driver's implicit transactions off and
    ``BEGIN`` / ``BEGIN IMMEDIATE`` issued by us. PostgreSQL and MariaDB: READ COMMITTED.

    Raises:
        InvalidInput: the driver is not installed (says what to install).
    """
    kwargs: dict[str, Any] = dict(options or {})
    if target.kind == "sqlite":
        kwargs["connect_args"] = {"timeout": busy_timeout, **kwargs.get("connect_args", {})}
        if target.memory:
            kwargs["poolclass"] = StaticPool
    else:
        kwargs.setdefault("isolation_level", "READ COMMITTED")
        kwargs.setdefault("pool_size", 10)
        kwargs.setdefault("max_overflow", 20)
        if target.kind == "mysql":
            kwargs.setdefault("pool_recycle", 1800)
    try:
        engine = create_async_engine(target.url, **kwargs)
    except ImportError as exc:
        driver = target.url.get_driver_name()
        hint = _INSTALL.get(driver, f"pip install {driver}")
        raise InvalidInput(f"The {driver} driver is not installed: {hint}") from exc
    if target.kind == "sqlite":
        install_sqlite_hooks(engine, wal=not target.memory)
    return engine


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
        return create_async_engine(target.url, poolclass=NullPool, **kwargs)

    return make


def install_sqlite_hooks(engine: AsyncEngine, *, wal: bool) -> None:
    """Take transaction control away from the sqlite3 module (it begins lazily and
    deferred) so every write transaction starts with ``BEGIN IMMEDIATE``."""

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            if wal:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=FULL")
        finally:
            cursor.close()

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
