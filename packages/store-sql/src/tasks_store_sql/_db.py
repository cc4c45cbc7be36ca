"""One database as the store uses it: an engine, its dialect, and the transaction runner.

Every store operation is one call of :meth:`Database.run`: one transaction on one
connection (SQLite writes first take this process's FIFO write slot and begin with
``BEGIN IMMEDIATE``), committed when the operation returns, rolled back when it raises,
re-run from scratch after a deadlock — and on SQLite while another process holds the
file's lock (:meth:`Database.when_free`) — and with every driver error translated.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import QueuePool
from tasks_core.errors import TasksError

from tasks_store_sql._dialect import WRITE, server_now
from tasks_store_sql._errors import (
    DRIVER_ERRORS,
    is_busy,
    is_retryable,
    translate,
    translated,
)
from tasks_store_sql._url import Kind
from tasks_store_sql._writers import WriterQueue

__all__ = ["CommitThenRaise", "Database"]

log = logging.getLogger("tasks_store_sql")
T = TypeVar("T")
MAX_ATTEMPTS = 5
BUSY_PAUSES = (0.0005, 0.004)
"""SQLite: the first and the longest pause between tries for a lock another process holds
(seconds; each pause doubles)."""
IDLE_DRIVERS = 4
"""The most connections :meth:`Database.run_driver` keeps checked out between calls (per
store), never the pool's last free one (:meth:`Database._keep`)."""
_DEFAULT_ISOLATION = "SELECT current_setting('default_transaction_isolation')"


class CommitThenRaise(Exception):
    """Raised by an operation that wrote something and must still refuse: the runner
    commits, then raises ``error`` (a claim past the delivery limit fails the task, then
    refuses the claim)."""

    def __init__(self, error: TasksError) -> None:
        super().__init__(str(error))
        self.error = error


Operation = Callable[[AsyncConnection], Awaitable[T]]


@dataclass(eq=False)
class Database:
    """An engine and how to run transactions on it.

    Attributes:
        engine: the SQLAlchemy async engine.
        kind: ``sqlite``, ``postgresql`` or ``mysql`` (MariaDB too).
        owns_engine: the store created the engine (and disposes of it on close).
        managed_sqlite: our SQLite hooks run on this engine (``BEGIN IMMEDIATE``).
        memory: an in-memory SQLite database (one shared connection).
        writers: the SQLite write queue (``None`` elsewhere).
        busy_timeout: seconds a SQLite writer may wait for its turn.
        write_prelude: run first in a SQLite write transaction on an engine we do not
            manage, to take the write lock at once.
        loop_engine: makes an engine for another event loop (PostgreSQL and MariaDB
            connections belong to the loop that opened them). ``None``: use ``engine``
            everywhere (SQLite's driver is loop-agnostic; an application's engine is the
            application's business).
    """

    engine: AsyncEngine
    kind: Kind
    owns_engine: bool
    managed_sqlite: bool = False
    memory: bool = False
    writers: WriterQueue | None = None
    busy_timeout: float = 5.0
    write_prelude: Operation[None] | None = field(default=None, repr=False)
    loop_engine: Callable[[], AsyncEngine] | None = field(default=None, repr=False)
    _home: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _others: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncEngine] = field(
        default_factory=weakref.WeakKeyDictionary, repr=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _idle: list[tuple[AsyncConnection, Any]] = field(default_factory=list, repr=False)
    _closing: bool = field(default=False, repr=False)
    _read_committed: weakref.WeakKeyDictionary[Any, bool] = field(
        default_factory=weakref.WeakKeyDictionary, repr=False
    )
    """Per driver connection: whether a statement on its own runs at READ COMMITTED."""

    def current(self) -> AsyncEngine:
        """The engine for the running event loop: ``engine`` on the loop that first used
        it, a pool-less engine of the same URL on any other loop (a thread running its
        own loop, as a sync facade does)."""
        if self.loop_engine is None:
            return self.engine
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._home is None:
                self._home = loop
            elif self._home is not loop and self._home.is_closed():
                # The pool's connections died with their loop: start a new pool here.
                self._drop_idle()
                self.engine.sync_engine.dispose(close=False)
                self._home = loop
            if loop is self._home:
                return self.engine
            engine = self._others.get(loop)
            if engine is None:
                engine = self._others[loop] = self.loop_engine()
            return engine

    def _drop_idle(self) -> None:
        """Let the kept connections of a closed event loop go: checked back in without
        I/O (no transaction is open on them), so the pool forgets them quietly."""
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            with contextlib.suppress(Exception):
                conn.sync_connection.close()  # type: ignore[union-attr]

    @property
    def what(self) -> str:
        """How error messages name this database."""
        return {"sqlite": "SQLite", "postgresql": "PostgreSQL", "mysql": "MariaDB/MySQL"}[
            self.kind
        ]

    async def now(self, conn: AsyncConnection) -> datetime:
        """The database clock, read on ``conn`` — after whatever lock ``conn`` holds.

        SQLite is a library in this process: its clock (``strftime('now')``) is this
        machine's, which every process sharing the file reads too; it is read here
        directly instead of through a statement (three thread hops of the driver)."""
        if self.kind == "sqlite":
            return datetime.now(UTC)
        return await server_now(conn, self.kind)

    def write_slot(self) -> AbstractAsyncContextManager[None]:
        """This process's turn to write the SQLite database (its writer queue; nothing to
        wait for on other databases): what :meth:`run` holds around a writing operation,
        for a store that writes on a connection of its own."""
        return self._slot(True)

    def _slot(self, write: bool) -> AbstractAsyncContextManager[None]:
        if self.writers is None or not (write or self.memory):
            return nullcontext()
        return self.writers.slot(self.busy_timeout)

    async def run(
        self,
        operation: Operation[T],
        *,
        write: bool,
        connection: AsyncConnection | None = None,
    ) -> T:
        """Run ``operation`` in one transaction and return its result.

        Args:
            operation: ``async (conn) -> result``; raising rolls everything back
                (``CommitThenRaise`` commits first).
            write: the operation may write (SQLite: take the write slot, BEGIN IMMEDIATE).
            connection: run on the caller's connection inside the caller's transaction
                instead (nothing is committed or rolled back here).

        Raises:
            StoreUnavailable: transient database failure; nothing was written.
            StoreError: the database refused the operation.
            TasksError: whatever ``operation`` raises.
        """
        if connection is not None:
            with translate(self.what):
                try:
                    return await operation(connection)
                except CommitThenRaise as outcome:
                    raise outcome.error from None
        for attempt in itertools.count(1):
            try:
                async with self._slot(write):
                    return await self.when_free(lambda: self._once(operation, write))
            except TasksError:
                raise
            except DRIVER_ERRORS as exc:
                if attempt < MAX_ATTEMPTS and is_retryable(exc):
                    log.info("transaction hit a deadlock; running it again (%d)", attempt)
                    continue
                raise translated(exc, self.what) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def run_driver(
        self, operation: Callable[[Any], Awaitable[T]], *, single_statement: bool = False
    ) -> T:
        """Run ``operation(driver_connection)`` in one transaction on the driver's own
        connection, outside SQLAlchemy's statement machinery (the PostgreSQL hot path on
        asyncpg: prepared statements, no statement building per call). Retries and
        error translation are those of :meth:`run`.

        ``single_statement``: ``operation`` runs exactly one statement, which is its own
        transaction at READ COMMITTED (no ``BEGIN``/``COMMIT`` round trips; on a
        connection whose default isolation is another — asked once per connection — it
        runs in an explicit READ COMMITTED transaction); it must not run more.

        Raises:
            StoreUnavailable: transient database failure; nothing was written.
            StoreError: the database refused the operation.
            TasksError: whatever ``operation`` raises.
        """
        for attempt in itertools.count(1):
            try:
                return await self._once_driver(operation, single_statement)
            except TasksError:
                raise
            except DRIVER_ERRORS as exc:
                if attempt < MAX_ATTEMPTS and is_retryable(exc):
                    log.info("transaction hit a deadlock; running it again (%d)", attempt)
                    continue
                raise translated(exc, self.what) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _checkout_driver(self) -> tuple[AsyncConnection, Any, bool]:
        """A connection and its driver connection for :meth:`run_driver`: an idle one kept
        from an earlier call on the home loop (no pool round trip), else a new checkout;
        and whether it may be kept afterwards."""
        engine = self.current()
        home = engine is self.engine
        if home and self._idle:
            conn, driver = self._idle.pop()
            return conn, driver, True
        conn = await engine.connect()
        return conn, (await conn.get_raw_connection()).driver_connection, home

    async def _once_driver(
        self, operation: Callable[[Any], Awaitable[T]], single_statement: bool
    ) -> T:
        conn, driver, keepable = await self._checkout_driver()
        ended = False
        try:
            try:
                if single_statement and await self._reads_committed(driver):
                    try:
                        result = await operation(driver)
                    except Exception:
                        ended = not driver.is_in_transaction()  # a failed statement: no
                        raise  # transaction is left open, the connection stays usable
                    ended = True
                    return result
                # Inside the ``try``: a pooled connection the server closed raises here,
                # and must be invalidated like any other dead connection.
                transaction = driver.transaction(isolation="read_committed")
                await transaction.start()
                try:
                    result = await operation(driver)
                except CommitThenRaise as outcome:
                    await transaction.commit()
                    ended = True
                    raise outcome.error from None
                except BaseException:
                    with contextlib.suppress(*DRIVER_ERRORS):
                        await transaction.rollback()
                        ended = True
                    raise
                await transaction.commit()
                ended = True
                return result
            finally:
                if not ended or driver.is_closed():
                    # A transaction left open, or a dead connection: the pool must not
                    # hand it out again.
                    keepable = False
                    await conn.invalidate()
        finally:
            if keepable and self._keep():
                self._idle.append((conn, driver))
            else:
                await conn.close()

    def _keep(self) -> bool:
        """Whether a connection :meth:`run_driver` is done with may stay checked out for
        the next call: fewer than ``IDLE_DRIVERS`` are kept, the store is not closing, this
        loop is still the home loop (another may have taken over since the checkout), and
        the pool still has a free connection besides it — so a kept connection never
        starves anyone waiting on the pool, the store's own transactions or the
        application sharing its engine (once none is free, every connection a call is
        done with goes back to the pool, to whoever waits)."""
        if len(self._idle) >= IDLE_DRIVERS or self._closing:
            return False
        with self._lock:  # the home loop may have moved on (its first loop closed)
            if self._home is not asyncio.get_running_loop():
                return False
        pool = self.engine.pool
        if not isinstance(pool, QueuePool):
            return True  # no limit: every checkout may open a connection
        overflow = pool._max_overflow  # QueuePool has no public reader of it
        return overflow < 0 or pool.checkedout() < pool.size() + overflow

    async def _reads_committed(self, driver: Any) -> bool:
        """Whether a statement on its own runs at READ COMMITTED on ``driver`` (the
        server's or the role's ``default_transaction_isolation``)."""
        known = self._read_committed.get(driver)
        if known is None:
            level = await driver.fetchval(_DEFAULT_ISOLATION)
            known = self._read_committed[driver] = level == "read committed"
        return known

    async def when_free(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()``, tried again after a short pause while SQLite answers busy —
        another process holds the file's write lock — until ``busy_timeout`` has passed;
        then its error. Nothing of a busy try was written.

        SQLite cannot tell a waiter when a lock is free, and its own busy handler sleeps
        long between tries, missing the gaps between another process's commits. The
        store's connections answer busy at once (``PRAGMA busy_timeout = 0``) and wait
        here, in short doubling pauses (:data:`BUSY_PAUSES`). Other databases, and SQLite
        engines the application owns, try once.
        """
        if self.kind != "sqlite" or not self.managed_sqlite:
            return await attempt()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.busy_timeout
        pause = BUSY_PAUSES[0]
        while True:
            try:
                return await attempt()
            except DRIVER_ERRORS as exc:
                if not is_busy(exc) or loop.time() + pause > deadline:
                    raise
            await asyncio.sleep(pause)  # polling: SQLite has no wait for a lock's release
            pause = min(pause * 2, BUSY_PAUSES[1])

    async def _once(self, operation: Operation[T], write: bool) -> T:
        async with self.current().connect() as conn:
            if write and self.kind == "sqlite" and self.managed_sqlite:
                await conn.execution_options(**{WRITE: True})
            elif self.kind != "sqlite" and not self.owns_engine:
                await conn.execution_options(isolation_level="READ COMMITTED")
            transaction = await conn.begin()
            try:
                if write and self.write_prelude is not None:
                    await self.write_prelude(conn)
                result = await operation(conn)
            except CommitThenRaise as outcome:
                await transaction.commit()
                raise outcome.error from None
            except BaseException:
                with contextlib.suppress(*DRIVER_ERRORS):
                    await transaction.rollback()
                raise
            await transaction.commit()
            return result

    @asynccontextmanager
    async def connection(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """A connection in a transaction for maintenance (migrations); no retries.

        Raises:
            StoreUnavailable, StoreError: as for :meth:`run`.
        """
        with translate(self.what):
            async with self._slot(write), self.current().connect() as conn:
                if write and self.kind == "sqlite" and self.managed_sqlite:
                    await conn.execution_options(**{WRITE: True})
                transaction = await self.when_free(conn.begin)
                try:
                    yield conn
                except BaseException:
                    await transaction.rollback()
                    raise
                await transaction.commit()

    async def dispose(self) -> None:
        """Give back the connections kept for :meth:`run_driver` and dispose of the
        engines the store created (connections of another, or a closed, event loop are
        let go without a goodbye: they cannot be closed from here)."""
        loop = asyncio.get_running_loop()
        self._closing = True
        if self._home is None or self._home is loop:
            idle, self._idle = self._idle, []
            for conn, _ in idle:
                with contextlib.suppress(*DRIVER_ERRORS):
                    await conn.close()
        else:
            self._drop_idle()
        if not self.owns_engine:
            return
        with self._lock:
            home = self._home
            others = list(self._others.items())
            self._others.clear()
        with translate(self.what):
            await self.engine.dispose(close=home is None or home is loop)
            for other_loop, engine in others:
                await engine.dispose(close=other_loop is loop)
