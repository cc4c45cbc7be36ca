"""Wakeups on a SQLite file: another connection's commit, seen through ``PRAGMA
data_version``.

SQLite has no notifications, but each connection counts the commits other connections
made to the file (``PRAGMA data_version``), and reading it touches no table and takes no
lock a writer waits for, so a waiter polls it (:data:`POLL_S`). Rules: any commit by
another connection wakes a waiter (a spurious wakeup costs one empty claim); the watcher
keeps the last value any waiter saw, so a commit made while a worker was busy wakes its
next wait at once; the watcher's own connection is read-only and never writes; a file it
cannot read wakes the waiter, whose claim then meets the real error. Cancels are read,
not heard: :meth:`ChangeWatcher.wait_for_cancels`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.sql.compiler import SQLCompiler
from tasks_core.models import TaskStatus

__all__ = ["POLL_S", "CancelledQuery", "ChangeWatcher"]

POLL_S = 0.01
"""How often a waiter reads the counter, in seconds: the wakeup's latency."""


@dataclass(frozen=True)
class CancelledQuery:
    """``SELECT id FROM <tasks> WHERE status = 'cancelled' AND id IN (ids)``, compiled
    once for SQLite from the namespace's table (the ids: one JSON array parameter, read
    by ``json_each``, so one statement serves any number of them)."""

    sql: str
    order: tuple[str, ...]
    defaults: dict[str, Any]

    @classmethod
    def of(cls, tasks: sa.Table) -> CancelledQuery:
        """The query on ``tasks`` (the store's table object)."""
        ids = sa.func.json_each(sa.bindparam("ids", type_=sa.Text)).table_valued("value")
        statement = sa.select(tasks.c.id).where(
            tasks.c.status == sa.bindparam("status", TaskStatus.CANCELLED.value,
                                           type_=sa.Text),
            tasks.c.id.in_(sa.select(ids.c.value)),
        )
        compiled = statement.compile(dialect=sqlite.dialect())
        assert isinstance(compiled, SQLCompiler)
        return cls(str(compiled), tuple(compiled.positiontup or ()), dict(compiled.params))

    def args(self, ids: list[str]) -> tuple[Any, ...]:
        """The positional parameters for ``ids``."""
        values = {**self.defaults, "ids": json.dumps(ids)}
        return tuple(values[name] for name in self.order)


class ChangeWatcher:
    """Waits for commits of other connections to one SQLite file (module docstring).

    Args:
        path: the database file.
        poll: seconds between reads of the counter.
        cancelled: the read of cancelled tasks (:meth:`wait_for_cancels`).
    """

    def __init__(
        self, path: str, poll: float = POLL_S, cancelled: CancelledQuery | None = None
    ) -> None:
        self.path = path
        self.poll = poll
        self.cancelled = cancelled
        self._conn: sqlite3.Connection | None = None
        self._seen: int | None = None
        self._closed = False
        self._lock = threading.Lock()  # event loops in several threads may share a store

    def _connection(self) -> sqlite3.Connection:
        """The watcher's connection (held under ``_lock``), opened when first needed."""
        if self._conn is None:
            # (read-only, never waits on a lock, never writes: its commits would not
            # count anyway; autocommit: no read transaction outlives a statement)
            self._conn = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, timeout=0,
                isolation_level=None, check_same_thread=False,
            )
        return self._conn

    def _version(self) -> int | None:
        """The file's change counter (``None``: it cannot be read now), read on the event
        loop's thread: a read of shared memory (WAL's index), not a query of the tables."""
        with self._lock:
            try:
                row = self._connection().execute("PRAGMA data_version").fetchone()
            except sqlite3.Error:
                return None
            return int(row[0])

    def _cancelled_of(self, ids: list[str]) -> set[str] | None:
        """Which of ``ids`` are cancelled (``None``: the file cannot be read now)."""
        assert self.cancelled is not None
        with self._lock:
            try:
                rows = self._connection().execute(
                    self.cancelled.sql, self.cancelled.args(ids)).fetchall()
            except sqlite3.Error:
                return None
        return {str(row[0]) for row in rows}

    def _changed(self, baseline: int | None) -> tuple[bool, int | None]:
        if self._closed:  # the store is closing: waiters return, as on PostgreSQL
            return True, baseline
        version = self._version()
        if version is None:
            return True, baseline
        if baseline is None:  # the first wait: from now on, every change counts
            baseline = version
            if self._seen is None:
                self._seen = version
        if version != baseline:
            self._seen = version
            return True, version
        return False, baseline

    async def wait(self, timeout: float) -> bool:
        """Wait until another connection commits to the file, or ``timeout`` seconds
        pass.

        Returns:
            ``True`` when something was committed since the last change a waiter saw (or
            the file cannot be read, or the watcher closed), ``False`` on timeout.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        changed, baseline = self._changed(self._seen)
        while not changed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.sleep(min(self.poll, remaining))  # the poll itself
            changed, baseline = self._changed(baseline)
        return True

    async def wait_for_cancels(self, task_ids: Collection[str], timeout: float) -> set[str]:
        """The ids of ``task_ids`` (the live collection) found cancelled when the wait
        begins or, later, after a change to the file; empty once ``timeout`` seconds
        pass or the watcher closed.

        One ``SELECT`` of the held ids that are ``cancelled`` (primary-key lookups) when
        the wait begins and again whenever the counter changed since the last read — no
        more often than the poll, never with no ids held. The caller's collection is read
        each time, so an id added while waiting counts from the next change; a cancel
        committed between two waits is found by the read that begins the next one. The
        read runs on the watcher's connection, which holds no read transaction between
        statements; a read that fails (busy outside WAL, the file gone) is tried again at
        the next poll."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        read_at: int | None = None  # the counter when the ids were last read
        while not self._closed:
            version = self._version()  # (before the read: a later commit changes it)
            if version is not None and version != read_at:
                ids = list(task_ids)
                found = self._cancelled_of(ids) if ids else set()
                if found:
                    return found
                if found is not None:
                    read_at = version
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await asyncio.sleep(min(self.poll, remaining))  # the poll itself
        return set()

    def close(self) -> None:
        """Close the watcher's connection; waiters return ``True`` at their next look."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
