"""URLs, engines and what differs between SQLite, PostgreSQL and MariaDB/MySQL.

Plain schemes map to the asyncio drivers: ``sqlite://`` -> aiosqlite, ``postgresql://`` and
``postgres://`` -> asyncpg, ``mysql://`` and ``mariadb://`` -> asyncmy. An explicit
driver (``postgresql+psycopg://``, ``mysql+asyncmy://``…) is kept when it is an asyncio
driver. The query parameter ``namespace`` is ours and never reaches the driver.

Every other query option goes to the driver's ``connect``, so it is checked here, before
anything connects: an option the driver (or SQLAlchemy's dialect for it) does not take,
or a value it cannot use, raises ``InvalidInput`` naming the option and listing the
accepted ones (:data:`QUERY_OPTIONS`), instead of a ``TypeError`` at the first connect or
an option silently ignored. On asyncpg the libpq spellings most copied URLs carry are
translated: ``sslmode`` becomes ``ssl`` (the same values: ``disable``, ``allow``,
``prefer``, ``require``, ``verify-ca``, ``verify-full``) and ``connect_timeout`` becomes
``timeout`` (seconds). SQLite takes ``uri`` and ``cached_statements``, and with
``uri=true`` SQLite's own URI parameters (``mode=ro``…), the path then written as a
SQLite URI (``sqlite:///file:tasks.db?mode=ro&uri=true``); ``timeout`` is the
``busy_timeout`` option, and the isolation level and type detection are the store's. An
option without a value (``?namespace=``), which SQLAlchemy would drop, is refused.
A URL that cannot be parsed (a port that is not a number from 1 to 65535, an unclosed
``[``) raises ``InvalidInput`` without quoting the URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import math
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool, StaticPool
from tasks_core.clock import utc
from tasks_core.errors import InvalidInput, StoreError

from tasks_store_sql._errors import connect_arguments

__all__ = [
    "QUERY_OPTIONS",
    "Kind",
    "Target",
    "check_server_version",
    "create_engine",
    "driver_params",
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
_EXTRAS = {"asyncmy": "mysql", "aiomysql": "aiomysql", "psycopg": "psycopg"}
"""The extra of tasks-store-sql that installs each optional driver."""
URL_HELP = (
    "SQL store URLs look like 'sqlite:///path/tasks.db', "
    "'postgresql://user:password@host:5432/db' or 'mysql://user:password@host:3306/db'"
)


# -- URL query options ------------------------------------------------------------------

Check = Callable[[str], object]
"""Turns an option's text into the value the driver takes; raises ``ValueError``."""


def _text(value: str) -> str:
    return value  # the driver's business (an empty ``sql_mode`` clears the modes)


def _count(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("negative")
    return number


def _seconds(value: str) -> float:
    number = float(value)
    if not 0 < number < math.inf:
        raise ValueError("not a positive number of seconds")
    return number


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _flag(value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE | _FALSE:
        return lowered in _TRUE
    raise ValueError("not a boolean")


def _choice(*values: str) -> Check:
    def check(value: str) -> str:
        if value not in values:
            raise ValueError("one of " + ", ".join(values))
        return value

    check.__doc__ = "one of " + ", ".join(values)
    return check


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
"""libpq's ``sslmode`` values, which asyncpg's ``ssl`` takes as they are."""

_ASYNCPG: dict[str, Check] = {
    # asyncpg.connect() keywords a URL can carry (text, numbers, flags)
    "ssl": _choice(*SSL_MODES),
    "timeout": _seconds,
    "command_timeout": _seconds,
    "statement_cache_size": _count,
    "max_cached_statement_lifetime": _count,
    "max_cacheable_statement_size": _count,
    "direct_tls": _flag,
    "passfile": _text,
    "service": _text,
    "servicefile": _text,
    "krbsrvname": _text,
    "gsslib": _choice("gssapi", "sspi"),
    "target_session_attrs": _choice(
        "any", "primary", "standby", "prefer-standby", "read-write", "read-only"
    ),
    # SQLAlchemy's own: its statement cache, and ``?host=h1:p1&host=h2:p2`` (several hosts)
    "prepared_statement_cache_size": _count,
    "host": _text,
}
_ASYNCPG_ALIASES = {"sslmode": "ssl", "connect_timeout": "timeout"}
"""libpq spellings translated for asyncpg."""

_ASYNCPG_TYPED = frozenset(
    name for name, check in _ASYNCPG.items() if check in (_seconds, _count, _flag)
) - {"prepared_statement_cache_size"}  # (SQLAlchemy's own, which it converts)
"""asyncpg keywords that need a number or a flag (SQLAlchemy passes the URL's text)."""

_LIBPQ_NAMES = (
    "hostaddr", "passfile", "require_auth", "channel_binding", "connect_timeout",
    "client_encoding", "options", "application_name", "fallback_application_name",
    "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
    "tcp_user_timeout", "gssencmode", "sslmode", "sslnegotiation", "sslcompression",
    "sslcert", "sslkey", "sslcertmode", "sslpassword", "sslrootcert", "sslcrl",
    "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version",
    "ssl_max_protocol_version", "krbsrvname", "gsslib", "gssdelegation", "service",
    "target_session_attrs", "load_balance_hosts", "host",
)
_LIBPQ: dict[str, Check] = dict.fromkeys(_LIBPQ_NAMES, _text)
"""psycopg: libpq's connection keywords (libpq parses their text itself)."""

_MYSQL_COMMON: dict[str, Check] = {
    # keywords of asyncmy.connect() and aiomysql.connect() alike; SQLAlchemy converts the
    # numbers and flags
    "charset": _text,
    "connect_timeout": _count,
    "init_command": _text,
    "sql_mode": _text,
    "unix_socket": _text,
    "read_default_file": _text,
    "read_default_group": _text,
    "local_infile": _flag,
    "client_flag": _count,
    "use_unicode": _flag,
}
_ASYNCMY: dict[str, Check] = {
    **_MYSQL_COMMON,
    "read_timeout": _count,
    "program_name": _text,
    # SQLAlchemy gathers these into the ``ssl`` dict asyncmy takes
    "ssl_ca": _text,
    "ssl_cert": _text,
    "ssl_key": _text,
    "ssl_capath": _text,
    "ssl_cipher": _text,
    "ssl_check_hostname": _flag,
}

_SQLITE: dict[str, Check] = {"uri": _flag, "cached_statements": _count}
_SQLITE_URI: dict[str, Check] = {  # SQLite's URI parameters (only with uri=true)
    "mode": _choice("ro", "rw", "rwc"),
    "cache": _choice("shared", "private"),
    "vfs": _text,
    "immutable": _flag,
    "nolock": _flag,
    "psow": _flag,
    "modeof": _text,
}
_SQLITE_REFUSED = {
    "timeout": "use the busy_timeout option",
    "isolation_level": "the store manages transactions",
    "detect_types": "the store decodes its own columns",
    "check_same_thread": "the driver's thread is the store's business",
}

QUERY_OPTIONS: dict[str, dict[str, Check]] = {
    "aiosqlite": {**_SQLITE, **_SQLITE_URI},
    "asyncpg": _ASYNCPG,
    "psycopg": _LIBPQ,
    "psycopg_async": _LIBPQ,
    "asyncmy": _ASYNCMY,
    "aiomysql": _MYSQL_COMMON,
}
"""Per asyncio driver: the URL query options it takes (besides ``namespace``)."""


def _check_query(driver: str, label: str, query: dict[str, Any]) -> dict[str, Any]:
    """The driver's query options, checked (see the module docstring), with the libpq
    spellings translated for asyncpg.

    Raises:
        InvalidInput: naming the option, never its value.
    """
    accepted = QUERY_OPTIONS[driver]
    aliases = _ASYNCPG_ALIASES if driver == "asyncpg" else {}
    listing = ", ".join(sorted({*aliases, *accepted, "namespace"}))
    uri = driver == "aiosqlite" and _flag_of(query.get("uri"))
    checked: dict[str, Any] = {}
    spelled: dict[str, str] = {}  # how the URL named each option
    for given, value in query.items():
        name = aliases.get(given, given)
        if driver == "aiosqlite" and name in _SQLITE_REFUSED:
            raise InvalidInput(f"SQLite URL option {name!r} is refused: {_SQLITE_REFUSED[name]}")
        check = accepted.get(name)
        if check is None:
            raise InvalidInput(
                f"{label} ({driver}) does not take the URL query option {given!r}; "
                f"it takes: {listing}"
            )
        if name in checked:
            first = spelled[name]
            raise InvalidInput(f"URL query options {first!r} and {given!r} are one option")
        if driver == "aiosqlite" and name in _SQLITE_URI and not uri:
            raise InvalidInput(
                f"SQLite URL option {name!r} is a URI parameter: name the file as a SQLite "
                f"URI and add uri=true (sqlite:///file:PATH?{name}=…&uri=true)")
        values = value if isinstance(value, tuple) else (value,)
        if len(values) > 1 and name != "host":
            raise InvalidInput(f"URL query option {given!r} is given more than once")
        for one in values:
            try:
                check(one)
            except ValueError:
                hint = check.__doc__  # the choices, if the option has a few
                raise InvalidInput(
                    f"URL query option {given!r} has a value {label} cannot use"
                    + (f" ({hint})" if hint else "")
                ) from None
        checked[name] = value
        spelled[name] = given
    return checked


def _flag_of(value: object) -> bool:
    try:
        return isinstance(value, str) and _flag(value)
    except ValueError:
        return False


def driver_params(driver: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` for the driver's ``connect``, with the URL's text turned into the numbers
    and flags the driver needs (asyncpg: SQLAlchemy passes most of the URL's text on as
    it is). Values that are not text (``connect_args``) are left alone."""
    if driver == "asyncpg":
        for name in _ASYNCPG_TYPED & params.keys():
            value = params[name]
            if isinstance(value, str):
                params[name] = _ASYNCPG[name](value)
    return params


def _parts(url: str) -> URL:
    """``make_url`` with every way it fails as ``InvalidInput`` (never quoting the URL:
    it may hold a password)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InvalidInput(URL_HELP) from None
    except (ValueError, TypeError):
        raise InvalidInput(
            f"{URL_HELP}; this one cannot be parsed (is the port a number, is an IPv6 "
            "host closed with ']'?)"
        ) from None
    if parsed.port is not None and not 0 < parsed.port <= 65535:
        raise InvalidInput("the port in the store URL must be a number from 1 to 65535")
    return parsed


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
        return sqlite_path_of(self.url)


def sqlite_path_of(url: URL) -> str:
    """The resolved path of the file a SQLite URL opens: its database, or with
    ``uri=true`` the file its ``file:`` URI names (:func:`_uri_file`)."""
    database = url.database or ""
    if _flag_of(url.query.get("uri")):
        database = _uri_file(database)
    return os.path.realpath(database)


def _uri_file(database: str) -> str:
    """The file a SQLite ``file:`` URI names (``file:PATH``, ``file:///PATH``,
    ``file://localhost/PATH``; percent-escapes decoded, as SQLite does). With
    ``uri=true`` SQLite reads the path as a URI only when it starts ``file:`` — any other
    text is a file name, query and all — so anything else is refused, as is an in-memory
    URI (``sqlite://`` is that store) and one naming another host.

    Raises:
        InvalidInput: saying how to write it.
    """
    example = "sqlite:///file:PATH?mode=ro&uri=true"
    if not database.startswith("file:"):
        raise InvalidInput(f"with uri=true the SQLite path must be a SQLite URI: {example}")
    path = database[len("file:"):]
    if path.startswith("//"):
        authority, slash, rest = path[2:].partition("/")
        if authority not in ("", "localhost"):
            raise InvalidInput(f"a SQLite URI names a file on this machine: {example}")
        path = slash + rest
    if not path or path.startswith(":"):
        raise InvalidInput("a SQLite URI must name a file; sqlite:// is the in-memory store")
    return unquote(path)


def parse_url(url: str) -> Target:
    """Parse a store URL (see the module docstring).

    Raises:
        InvalidInput: not a URL an SQL store serves.
    """
    if not isinstance(url, str) or "://" not in url:
        raise InvalidInput(URL_HELP)
    parsed = _parts(url)
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
    _check_no_blank_options(url)
    query = dict(parsed.query)
    raw_namespace = query.pop("namespace", None)
    if isinstance(raw_namespace, tuple):
        raise InvalidInput("URL query option 'namespace' is given more than once")
    namespace = raw_namespace
    label = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "mysql": "MariaDB/MySQL"}[kind]
    if kind == "sqlite" and (parsed.username or parsed.password or parsed.host or parsed.port):
        raise InvalidInput(f"{URL_HELP} (a SQLite URL has no user, password, host or port)")
    query = _check_query(driver, label, query)
    if kind == "sqlite" and _flag_of(query.get("uri")):
        _uri_file(parsed.database or "")
    name = "mariadb" if backend == "mariadb" else "postgresql" if kind == "postgresql" else kind
    parsed = parsed.set(drivername=f"{name}+{driver}", query=query)
    memory = kind == "sqlite" and parsed.database in (None, "", ":memory:")
    if kind == "mysql" and "charset" not in query:
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    try:  # what SQLAlchemy's dialect makes of the URL, as the first connect would
        parsed.get_dialect()().create_connect_args(parsed)
    except ImportError:  # the driver is missing: create_engine says what to install
        pass
    except (ArgumentError, ValueError, TypeError):
        raise InvalidInput(f"{URL_HELP} (this one has a host, port or option "
                           f"{label} cannot use)") from None
    return Target(parsed, kind, memory, namespace)


def _check_no_blank_options(url: str) -> None:
    """An option without a value (``?namespace=``) is refused: SQLAlchemy would drop it,
    and a store in the default namespace, or a connection without ``sslmode``, is not
    what the URL asked for.

    Raises:
        InvalidInput: naming the option.
    """
    try:
        query = urlsplit(url).query
    except ValueError:  # SQLAlchemy parsed it (checked before): its options are its own
        return
    for name, value in parse_qsl(query, keep_blank_values=True):
        if not value:
            raise InvalidInput(f"URL query option {name!r} has no value")


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
        InvalidInput: the driver is not installed, or cannot work as installed (says
            what to install).
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
    driver = target.url.get_driver_name()
    try:
        if driver == "aiomysql":
            _check_aiomysql()
        engine = create_async_engine(target.url, **kwargs)
    except ImportError as exc:
        raise InvalidInput(f"The {driver} driver is not installed or cannot be imported: "
                           f"{_install_hint(driver)}") from exc
    install_connect(engine)
    if target.kind == "sqlite":
        install_sqlite_hooks(engine, wal=not target.memory)
    return engine


def _install_hint(driver: str) -> str:
    """How to install ``driver``: the extra of tasks-store-sql that brings it."""
    extra = _EXTRAS.get(driver)
    if extra is None:
        return f"pip install {driver}"
    return (f"pip install 'tasks-store-sql[{extra}]' (not on PyPI yet: from a clone of the "
            f"repository, pip install './packages/store-sql[{extra}]')")


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
    its arguments as ``InvalidInput`` (:func:`~._errors.connect_arguments`), and an
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
        with connect_arguments(what):
            return dialect.connect(*cargs, **params)


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
            # From here on SQLite answers "busy" at once and the store waits for the lock
            # itself, in short tries (Database.when_free); the pragmas above still waited.
            cursor.execute("PRAGMA busy_timeout = 0")
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
