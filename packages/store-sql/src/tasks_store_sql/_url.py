"""Store URLs: which database and asyncio driver a URL names, parsed and checked.

Plain schemes map to the asyncio drivers: ``sqlite://`` -> aiosqlite, ``postgresql://``
and ``postgres://`` -> asyncpg, ``mysql://`` and ``mariadb://`` -> asyncmy; an explicit
asyncio driver (``postgresql+psycopg://``…) is kept. ``?namespace=`` is ours and never
reaches the driver; every other query option is checked by :mod:`._options`. With
``uri=true`` a SQLite path is a SQLite ``file:`` URI. Rules: a URL is refused with
``InvalidInput`` before anything connects — an option without a value (SQLAlchemy would
drop it), a port outside 1–65535, a URL that cannot be parsed — and a refusal never
quotes the URL (it may hold a password).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from tasks_core.errors import InvalidInput

from tasks_store_sql._options import check_query, flag_of

__all__ = ["URL_HELP", "Kind", "Target", "parse_url", "sqlite_path_of"]

Kind = Literal["sqlite", "postgresql", "mysql"]

_DRIVERS: dict[str, tuple[Kind, str, frozenset[str]]] = {
    "sqlite": ("sqlite", "aiosqlite", frozenset({"aiosqlite"})),
    "postgresql": ("postgresql", "asyncpg", frozenset({"asyncpg", "psycopg", "psycopg_async"})),
    "postgres": ("postgresql", "asyncpg", frozenset({"asyncpg", "psycopg", "psycopg_async"})),
    "mysql": ("mysql", "asyncmy", frozenset({"aiomysql", "asyncmy"})),
    "mariadb": ("mysql", "asyncmy", frozenset({"aiomysql", "asyncmy"})),
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
        return sqlite_path_of(self.url)


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
    query = check_query(driver, label, query)
    if kind == "sqlite" and flag_of(query.get("uri")):
        _uri_file(parsed.database or "")
    if kind == "mysql" and not parsed.database:  # (no default database to fall back on)
        raise InvalidInput(f"{URL_HELP} (a MariaDB/MySQL URL names its database: "
                           "mysql://user@host/dbname)")
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


def sqlite_path_of(url: URL) -> str:
    """The resolved path of the file a SQLite URL opens: its database, or with
    ``uri=true`` the file its ``file:`` URI names (:func:`_uri_file`)."""
    database = url.database or ""
    if flag_of(url.query.get("uri")):
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
