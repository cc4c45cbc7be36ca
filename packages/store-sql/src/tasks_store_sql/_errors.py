"""The one place where driver errors become core errors (like httpx's
``map_httpcore_exceptions``).

Rules: a transient failure — a connection lost, refused or timed out, a busy database, a
pool timeout, no connection slot left — is ``StoreUnavailable``; so is a connection the
database refuses as configured (no such database, a login refused, a SQLite file that
cannot be opened or is not a database), with the cause in plain words; a driver refusing
its own ``connect`` arguments is ``InvalidInput`` (:func:`connect_arguments`); anything
else is ``StoreError`` (a missing privilege in plain words too). Messages name the error
class and its SQLSTATE/errno/SQLite code only, never the driver's message (it may quote
stored values or a login; psycopg's connect errors, without a SQLSTATE, are classified by
libpq's text); the driver error stays chained for logs.
"""

from __future__ import annotations

import re
import socket
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc
from tasks_core.errors import InvalidInput, StoreError, StoreUnavailable, TasksError

__all__ = [
    "DRIVER_ERRORS",
    "NoServer",
    "connect_arguments",
    "describe",
    "is_busy",
    "is_retryable",
    "translate",
    "translated",
]

# SQLSTATE / MySQL errno of errors after which re-running the whole transaction is safe
# and likely to succeed: nothing of it was committed.
_RETRYABLE_STATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock
_RETRYABLE_ERRNOS = frozenset({1213})  # ER_LOCK_DEADLOCK
# SQLITE_BUSY, _LOCKED, _NOMEM, _IOERR, _FULL, _CANTOPEN, _PROTOCOL (primary codes)
_SQLITE_TRANSIENT = frozenset({5, 6, 7, 10, 13, 14, 15})
_TRANSIENT_STATES = ("08", "53", "57", "40", "55P03")  # connection, resources, operator…
_TRANSIENT_ERRNOS = frozenset(  # server errors; the client's own (2000 and up) all are
    {1040, 1053, 1152, 1158, 1159, 1160, 1161, 1205, 1213, 1317, 1927, 1969, 4031}
)
_SERVER_ERRNOS = 1000
"""MariaDB/MySQL server error numbers start here (a driver's ``(0, '')`` is its own: a
connection closed under it, judged by its class)."""
_CLIENT_ERRNOS = 2000
"""MariaDB/MySQL client error numbers (``CR_…``: the connection's) start here."""
_NO_SLOT = ("the server has no connection slot left (max_connections, or a connection "
            "limit of the role or database, is reached)")
# Connections refused as configured (see the module docstring), in plain words.
_REFUSED_STATES = {  # PostgreSQL: by SQLSTATE, else by class
    "3D000": "the database does not exist",
    "55000": ("the database does not accept connections now (ALLOW_CONNECTIONS is off: it "
              "is being renamed, moved or dropped?)"),
    "53300": _NO_SLOT,
    "28P01": "the password was refused",
    "28000": "the login was refused (an unknown role, or not allowed by pg_hba.conf)",
    "3D": "the database does not exist",
    "28": "the login was refused",
}
_NO_SERVER = "the server cannot be reached (is it running; are the host and port right?)"
_REFUSED_ERRNOS = {  # MariaDB/MySQL
    1040: _NO_SLOT,
    1049: "the database does not exist",
    1044: "the login may not use this database",
    1045: "the login was refused (an unknown user or a wrong password)",
    1698: "the login was refused (an unknown user or a wrong password)",
    2002: _NO_SERVER,
    2003: _NO_SERVER,
    2005: "the server cannot be reached: its host name is unknown",
}


class NoServer(ConnectionError):
    """A connection that found no database server where the URL points: no answer within
    the connect timeout (accepted and silent, or never accepted), or an answer that is not
    the database's (another program on the port). Raised by the store's own
    ``do_connect`` only: a connection lost later is not this."""


_UNREACHABLE: tuple[tuple[type[BaseException], str], ...] = (  # the driver's OSError
    (socket.gaierror, "the server cannot be reached: its host name is unknown"),
    (ConnectionRefusedError, _NO_SERVER),
    (NoServer, _NO_SERVER),
)
_LIBPQ_WORDS = (  # psycopg's connect errors carry no SQLSTATE: libpq's text, read, never shown
    (r"failed to resolve host|could not translate host name", _UNREACHABLE[0][1]),
    (r"Connection refused|timeout expired|invalid response to SSL negotiation", _NO_SERVER),
    (r"password authentication failed", _REFUSED_STATES["28P01"]),
    (r'FATAL:  role ".*" does not exist|no pg_hba\.conf entry', _REFUSED_STATES["28000"]),
    (r'FATAL:  database ".*" does not exist', _REFUSED_STATES["3D000"]),
    (r'database ".*" is not currently accepting connections', _REFUSED_STATES["55000"]),
)
_LOST = ("the connection to the server was lost (a restart, a failover or a network cut; "
         "the next call connects again)")
_LOST_STATES = ("08", "57P01", "57P02", "57P03")  # connection exception; shutdowns
_LOST_ERRNOS = frozenset({2006, 2013, 2055})  # gone away, lost during a query, lost
_DENIED = ("the login lacks a privilege this needs (making or migrating the tables needs "
           "CREATE on the schema on PostgreSQL, CREATE, ALTER, INDEX and DROP on the "
           "database on MariaDB/MySQL; using them, SELECT, INSERT, UPDATE and DELETE on each)")
# Operations refused for want of a right (not transient: the store stays refused until
# someone grants it), in plain words.
_DENIED_STATES = {"42501": _DENIED}  # PostgreSQL's insufficient_privilege
_DENIED_ERRNOS = {1142: _DENIED, 1143: _DENIED, 1227: _DENIED}  # table, column, global
_DENIED_SQLITE = {8: "the database file is read-only here (mode=ro, or a file or directory "
                     "this process may not write)"}
_REFUSED_SQLITE = {  # primary result codes
    5: "another connection held the file's write lock past busy_timeout (transient)",
    14: ("the database file cannot be opened (a directory of that name, or its directory "
         "missing or not writable?)"),
    26: "the file is not a SQLite database",
}


def _driver_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [sqlite3.Error, OSError, TimeoutError]
    try:
        import asyncpg  # type: ignore[import-untyped,unused-ignore]

        # InternalClientError: a connection whose backend was terminated mid-operation
        # ("cannot switch to state …"); transient like a lost connection.
        found += [asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError]
    except ImportError:  # pragma: no cover - asyncpg is a dependency
        pass
    try:
        import asyncmy.errors  # type: ignore[import-untyped,unused-ignore]

        found.append(asyncmy.errors.Error)
    except ImportError:  # pragma: no cover - optional driver
        pass
    try:
        import pymysql  # type: ignore[import-untyped,unused-ignore]

        found.append(pymysql.err.Error)
    except ImportError:  # pragma: no cover - optional driver
        pass
    return tuple(found)


DRIVER_ERRORS: tuple[type[BaseException], ...] = (sa_exc.SQLAlchemyError, *_driver_errors())
"""Everything :func:`translate` maps."""


def _origin(exc: BaseException) -> BaseException:
    orig = getattr(exc, "orig", None)
    return orig if isinstance(orig, BaseException) else exc


def _driver_error(exc: BaseException) -> BaseException:
    """The driver's own exception: SQLAlchemy's asyncio adapters raise an emulated DBAPI
    error (``Error``) caused by the driver's (``InvalidCatalogNameError``)."""
    orig = _origin(exc)
    cause = orig.__cause__
    if type(orig).__module__.startswith("sqlalchemy.") and isinstance(cause, BaseException):
        return cause
    return orig


def _sqlstate(exc: BaseException) -> str | None:
    for candidate in (exc, _origin(exc), getattr(_origin(exc), "__cause__", None)):
        state = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if isinstance(state, str):
            return state
    return None


def _errno(exc: BaseException) -> int | None:
    orig = _origin(exc)
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


def _mysql_errno(exc: BaseException) -> int | None:
    """The error number of a MariaDB/MySQL driver's error (``None``: not one; an
    ``OSError``'s number is the system's)."""
    errno = _errno(exc)
    return None if errno is None or isinstance(_driver_error(exc), OSError) else errno


def _sqlite_code(exc: BaseException) -> int | None:
    for candidate in (_origin(exc), _driver_error(exc)):
        if isinstance(candidate, sqlite3.Error):
            code = getattr(candidate, "sqlite_errorcode", None)
            if isinstance(code, int):
                return code & 0xFF
    return None


def _refusal(exc: BaseException) -> str | None:
    """A connection refused as configured, or a server that cannot be reached, in plain
    words (``None``: not one)."""
    driver = _driver_error(exc)
    for kind, words in _UNREACHABLE:
        if isinstance(driver, kind):
            return words
    if type(driver).__module__.startswith("psycopg") and _sqlstate(exc) is None:
        text = str(driver)
        return next((words for found, words in _LIBPQ_WORDS if re.search(found, text)), None)
    return _coded(exc, _REFUSED_ERRNOS, _REFUSED_STATES, _REFUSED_SQLITE)


def _denial(exc: BaseException) -> str | None:
    """An operation refused for want of a right, in plain words (``None``: not one)."""
    return _coded(exc, _DENIED_ERRNOS, _DENIED_STATES, _DENIED_SQLITE)


def _coded(
    exc: BaseException,
    by_errno: dict[int, str],
    by_state: dict[str, str],
    by_sqlite: dict[int, str],
) -> str | None:
    """The words the table of ``exc``'s database gives its code: MariaDB/MySQL's errno
    first (its errors carry a SQLSTATE too), else PostgreSQL's SQLSTATE (or its class),
    else SQLite's primary result code; ``None`` when the table has no entry."""
    errno = _mysql_errno(exc)
    if errno is not None:
        return by_errno.get(errno)
    state = _sqlstate(exc)
    if state is not None:
        return by_state.get(state) or by_state.get(state[:2])
    code = _sqlite_code(exc)
    return by_sqlite.get(code) if code is not None else None


def _lost(exc: BaseException) -> str | None:
    """A connection lost while in use, in plain words (``None``: not one)."""
    state = _sqlstate(exc)
    if (isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated) \
            or (state is not None and state.startswith(_LOST_STATES)) \
            or _errno(exc) in _LOST_ERRNOS:
        return _LOST
    return None


def is_busy(exc: BaseException) -> bool:
    """Whether SQLite answered ``SQLITE_BUSY``: another connection holds the lock asked
    for (nothing of the failed transaction was written)."""
    return _sqlite_code(exc) == 5


def is_retryable(exc: BaseException) -> bool:
    """Whether the failed transaction may simply be run again (deadlock, serialization)."""
    state = _sqlstate(exc)
    return (state is not None and state in _RETRYABLE_STATES) or _errno(exc) in _RETRYABLE_ERRNOS


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    if _refusal(exc) is not None:
        return True
    if _denial(exc) is not None:  # MariaDB's are OperationalError: a grant, not a retry
        return False
    errno = _mysql_errno(exc)
    if errno is not None and errno >= _SERVER_ERRNOS:
        # MariaDB/MySQL: its drivers raise OperationalError for a server's refusals too
        # (an unknown column, a duplicate key name): judged by the number, not the class
        return errno in _TRANSIENT_ERRNOS or errno >= _CLIENT_ERRNOS
    code = _sqlite_code(exc)
    if code is not None:
        return code in _SQLITE_TRANSIENT
    if isinstance(
        exc,
        (
            sa_exc.OperationalError,
            sa_exc.InterfaceError,
            sa_exc.DisconnectionError,
            sa_exc.TimeoutError,
            sa_exc.InvalidatePoolError,
            OSError,
            TimeoutError,
            sqlite3.OperationalError,
        ),
    ):
        return True
    state = _sqlstate(exc)
    if state is not None and state.startswith(_TRANSIENT_STATES):
        return True
    name = type(_origin(exc)).__name__
    words = ("Connection", "Interface", "Shutdown", "Timeout", "InternalClient")
    return any(word in name for word in words)


def describe(exc: BaseException) -> str:
    """``ErrorClass [code]`` — never the driver's message (it may quote stored values)."""
    driver = _driver_error(exc)
    code: str | int | None = _sqlstate(exc) or _errno(exc)
    if code is None and isinstance(driver, sqlite3.Error):
        name = getattr(driver, "sqlite_errorname", None)
        code = name if isinstance(name, str) else None
    return f"{type(driver).__name__}" + (f" [{code}]" if code is not None else "")


def translated(exc: BaseException, what: str = "the database") -> StoreError:
    """The core error for the driver error ``exc`` (raise it ``from exc``).

    ``StoreUnavailable``: nothing was committed, unless the commit itself was cut off
    (no driver can tell). A refused connection is ``StoreUnavailable`` on every database
    alike — the store works once the server or configuration is fixed — and a file that
    is not a SQLite database is not ``StoreCorrupt`` (which is about one task record)."""
    detail = describe(exc)
    plain = _refusal(exc) or _denial(exc) or _lost(exc)
    if plain is not None:
        detail = f"{plain} ({detail})"
    if _is_transient(exc):
        return StoreUnavailable(f"{what} is unavailable: {detail}")
    return StoreError(f"{what} refused the operation: {detail}")


@contextmanager
def translate(what: str = "the database") -> Iterator[None]:
    """Map driver errors raised inside the block to the core error tree.

    Raises:
        StoreUnavailable: transient failures (see the module docstring).
        StoreError: anything else the driver raised.
    """
    try:
        yield
    except TasksError:
        raise
    except DRIVER_ERRORS as exc:
        raise translated(exc, what) from exc


_PASSING: tuple[type[BaseException], ...] = (TasksError, *DRIVER_ERRORS)
_UNEXPECTED_KEYWORD = re.compile(  # Python's wording; C functions' (sqlite3)
    r"unexpected keyword argument '(\w+)'|'(\w+)' is an invalid keyword argument"
)


@contextmanager
def connect_arguments(what: str = "the database") -> Iterator[None]:
    """Around one call of a driver's ``connect`` only: the driver refusing the arguments
    it was given (``TypeError``: an unexpected keyword or a value of the wrong type;
    ``ValueError``/``OverflowError``: a value out of range, such as the port) is bad
    input. The driver's own errors (and ours) pass through untouched, for
    :func:`translate`.

    Raises:
        InvalidInput: naming the refused keyword when the driver named one, never a
            value (it may be a password).
    """
    try:
        yield
    except _PASSING:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        found = _UNEXPECTED_KEYWORD.search(str(exc)) if isinstance(exc, TypeError) else None
        if found is not None:
            keyword = found.group(1) or found.group(2)
            message = f"{what} does not accept the connection option {keyword!r}"
        else:
            message = f"{what} refused the connection settings ({type(exc).__name__})"
        raise InvalidInput(
            f"{message}; check the URL's query options and engine_options['connect_args']"
        ) from exc
