"""A SQLite file's writer connection: one ``sqlite3`` connection on a thread of its own,
which runs a whole write transaction per call — one thread hop, where the driver's
connection (aiosqlite under SQLAlchemy) takes several per statement.

Rules: the connection is set up exactly as the engine's (``prepare_sqlite_connection``:
``BEGIN`` issued by us, WAL, ``synchronous=FULL``, busy answered at once); it is opened
on its thread at the first call and used only there; the caller holds the file's write
slot and its busy retries (``Database``). Statements are SQLAlchemy statements compiled
once for the engine's dialect (:class:`Prepared`), never text built from values.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

from tasks_store_sql._dialect import prepare_sqlite_connection

__all__ = ["Prepared", "WriterConnection", "in_transaction"]

T = TypeVar("T")


class Prepared:
    """A statement compiled once for ``dialect``: its text and how to bind a row of
    values (by column or parameter name; the statement's own constants by default),
    each through its column type's bind processing, as the engine would."""

    def __init__(self, statement: sa.ClauseElement, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        self.sql = compiled.string
        self._names = tuple(compiled.positiontup or ())
        self._defaults = {name: bind.effective_value for name, bind in compiled.binds.items()
                          if not bind.required}
        self._processors = tuple(
            compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in self._names
        )

    def params(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional parameters for ``values``."""
        bound = []
        for name, processor in zip(self._names, self._processors, strict=True):
            value = values[name] if name in values else self._defaults[name]
            bound.append(value if processor is None else processor(value))
        return tuple(bound)


class WriterConnection:
    """One ``sqlite3`` connection and the one thread that uses it (module docstring)."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], *, set_wal: bool) -> None:
        self._connect = connect
        self._set_wal = set_wal
        """Whether to switch the file to WAL (``create_engine``'s ``set_wal``)."""
        self._connection: sqlite3.Connection | None = None
        self._thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="tasks-sqlite-writer")

    async def run(self, transaction: Callable[[sqlite3.Connection], T]) -> T:
        """``transaction(connection)`` on the writer's thread; it begins and ends its own
        transaction.

        Raises:
            sqlite3.Error: whatever the database answered (busy included).
        """
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._call, transaction)

    def _call(self, transaction: Callable[[sqlite3.Connection], T]) -> T:
        if self._connection is None:
            connection = self._connect()
            try:
                prepare_sqlite_connection(connection, wal=self._set_wal)
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return transaction(self._connection)

    async def close(self) -> None:
        """Close the connection (on its thread) and let the thread go."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(sqlite3.Error, RuntimeError):
            await loop.run_in_executor(self._thread, self._close)
        self._thread.shutdown(wait=False)

    def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


def in_transaction(connection: sqlite3.Connection, work: Callable[[], T | None]) -> T | None:
    """``work()`` inside ``BEGIN IMMEDIATE``: committed when it returns a result, rolled
    back when it returns ``None`` (nothing to keep) or raises.

    Raises:
        sqlite3.Error: the database's answer (busy: nothing was written).
    """
    connection.execute("BEGIN IMMEDIATE")
    try:
        result = work()
        connection.execute("COMMIT" if result is not None else "ROLLBACK")
    except BaseException:
        if connection.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
        raise
    return result
