"""Wakeups on a SQLite file: another connection's commit, seen through ``PRAGMA
data_version``.

SQLite has no notifications, but every connection keeps a counter of the changes other
connections committed to the file (``PRAGMA data_version``): reading it touches no table
and takes no lock a writer waits for (WAL: it reads the shared index), so a waiter can
look every few milliseconds for next to nothing. A waiter returns ``True`` as soon as the
counter differs from what the watcher last saw — any commit by any process or connection:
a task created, released, answered or rescheduled, or anything else (a spurious wakeup
costs one empty claim, as a lost ``LISTEN`` connection does on PostgreSQL). The watcher
keeps the last value any waiter saw, so a commit made while a worker was busy claiming
wakes its next wait at once.

A commit of the watcher's own connection would not count, and it never writes. The
counter is read on the event loop's thread: a read of shared memory, not a query of the
tables. A file the watcher cannot read (busy, gone) wakes the waiter, whose claim then
meets the real error.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading

__all__ = ["POLL_S", "ChangeWatcher"]

POLL_S = 0.01
"""How often a waiter reads the counter, in seconds: the wakeup's latency."""


class ChangeWatcher:
    """Waits for commits of other connections to one SQLite file (module docstring).

    Args:
        path: the database file.
        poll: seconds between reads of the counter.
    """

    def __init__(self, path: str, poll: float = POLL_S) -> None:
        self.path = path
        self.poll = poll
        self._conn: sqlite3.Connection | None = None
        self._seen: int | None = None
        self._closed = False
        self._lock = threading.Lock()  # event loops in several threads may share a store

    def _version(self) -> int | None:
        """The file's change counter (``None``: it cannot be read now)."""
        with self._lock:
            try:
                if self._conn is None:
                    # (read-only, never waits on a lock, never writes: its commits would
                    # not count anyway)
                    self._conn = sqlite3.connect(
                        f"file:{self.path}?mode=ro", uri=True, timeout=0,
                        isolation_level=None, check_same_thread=False,
                    )
                row = self._conn.execute("PRAGMA data_version").fetchone()
            except sqlite3.Error:
                return None
            return int(row[0])

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

    def close(self) -> None:
        """Close the watcher's connection; waiters return ``True`` at their next look."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
