"""The one place where driver errors become core errors (like httpx's
``map_httpcore_exceptions``).

- connection lost, refused or timed out, a busy or locked database, a pool timeout, a
  killed backend: :class:`~tasks_core.errors.StoreUnavailable` (transient; nothing was
  committed unless the commit itself was cut off, which no driver can tell us);
- anything else the database refuses: :class:`~tasks_core.errors.StoreError`.

Messages name the error class and its SQLSTATE/errno only: driver messages may quote
stored values, and stored text is never repeated. The driver error stays chained
(``raise … from exc``) for logs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc
from tasks_core.errors import StoreError, StoreUnavailable, TasksError

__all__ = ["DRIVER_ERRORS", "describe", "is_retryable", "translate", "translated"]

# SQLSTATE / MySQL errno of errors after which re-running the whole transaction is safe
# and likely to succeed: nothing of it was committed.
_RETRYABLE_STATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock
_RETRYABLE_ERRNOS = frozenset({1213})  # ER_LOCK_DEADLOCK
# SQLITE_BUSY, _LOCKED, _NOMEM, _IOERR, _FULL, _CANTOPEN, _PROTOCOL (primary codes)
_SQLITE_TRANSIENT = frozenset({5, 6, 7, 10, 13, 14, 15})
_TRANSIENT_STATES = ("08", "53", "57", "40", "55P03")  # connection, resources, operator…
_TRANSIENT_ERRNOS = frozenset(
    {1040, 1053, 1152, 1159, 1161, 1205, 1213, 2002, 2003, 2006, 2013, 2055, 1927, 4031}
)


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


def is_retryable(exc: BaseException) -> bool:
    """Whether the failed transaction may simply be run again (deadlock, serialization)."""
    state = _sqlstate(exc)
    return (state is not None and state in _RETRYABLE_STATES) or _errno(exc) in _RETRYABLE_ERRNOS


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    orig = _origin(exc)
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF in _SQLITE_TRANSIENT
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
    if _errno(exc) in _TRANSIENT_ERRNOS:
        return True
    name = type(_origin(exc)).__name__
    words = ("Connection", "Interface", "Shutdown", "Timeout", "InternalClient")
    return any(word in name for word in words)


def describe(exc: BaseException) -> str:
    """``ErrorClass [code]`` — never the driver's message (it may quote stored values)."""
    orig = _origin(exc)
    code = _sqlstate(exc) or _errno(exc)
    return f"{type(orig).__name__}" + (f" [{code}]" if code is not None else "")


def translated(exc: BaseException, what: str = "the database") -> StoreError:
    """The core error for the driver error ``exc`` (raise it ``from exc``)."""
    if _is_transient(exc):
        return StoreUnavailable(f"{what} is unavailable: {describe(exc)}")
    return StoreError(f"{what} refused the operation: {describe(exc)}")


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
