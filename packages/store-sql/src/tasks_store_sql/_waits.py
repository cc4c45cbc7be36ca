"""Waiting for work and for cancels: ``wait_for_work`` and ``wait_for_cancels`` of
:class:`~tasks_store_sql.store.SQLStore`.

The rule: PostgreSQL with asyncpg listens (:mod:`._wakeups`: one connection per event
loop, on the namespace's work and cancel channels); a SQLite file watches its change
counter (:mod:`._sqlite_watch`); every other database (in-memory SQLite, MariaDB/MySQL,
PostgreSQL on psycopg) refuses both with ``CapabilityNotSupported`` and the runtime
polls (work) or learns of a cancel at its heartbeat. The writes notify in their own
transaction: work on PostgreSQL with asyncpg (``pg_notify(work channel, queue)``), and
every transition that ends ``cancelled`` on PostgreSQL whatever the driver
(``pg_notify(cancel channel, task id)``), so a cancel made by a psycopg client still
reaches workers that listen.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
import weakref
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core import rules
from tasks_core.durations import check_wait_timeout
from tasks_core.errors import CapabilityNotSupported

from tasks_store_sql._base import sqlite_file
from tasks_store_sql._sqlite_watch import CancelledQuery, ChangeWatcher
from tasks_store_sql._transitions import TransitionOps
from tasks_store_sql._wakeups import (
    Listener,
    asyncpg_connector,
    cancel_channel_of,
    channel_of,
)

__all__ = ["WaitOps"]

_Kept = TypeVar("_Kept")


class WaitOps(TransitionOps):
    """The waits of ``SQLStore`` and what they keep per event loop (module docstring)."""

    def __init__(self, url: str | None = None, **options: Any) -> None:
        super().__init__(url, **options)
        self._channel = channel_of(self.tables.prefix)
        self._cancel_channel = cancel_channel_of(self.tables.prefix)
        self._connect_args: dict[str, Any] = dict(
            (options.get("engine_options") or {}).get("connect_args", {})
        )
        self._listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Listener] = (
            weakref.WeakKeyDictionary()
        )
        self._per_loop_lock = threading.Lock()
        """Guards the maps kept per event loop (listeners, grouped creates)."""
        self._listening = True
        """``False`` once ``aclose`` began: no wait opens a listening connection again."""
        self._watcher = ChangeWatcher(
            sqlite_file(self._db.engine), cancelled=CancelledQuery.of(self.tables.tasks)
        ) if self._db.kind == "sqlite" and not self._db.memory else None
        """A SQLite file's wakeups (its connection opens at the first wait)."""

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """Wait until work may be claimable on ``queues`` — a task created, released,
        answered or rescheduled there — or ``timeout`` seconds pass (see
        ``TaskStore.wait_for_work``). PostgreSQL with asyncpg (``LISTEN``/``NOTIFY``)
        and SQLite files (the change counter) only.

        Returns:
            ``True`` when woken early (or the store is closing or closed: at once, as a
            SQLite file's watcher answers; a wait after ``aclose`` opens no listening
            connection, which nothing would close), ``False`` on timeout.

        Raises:
            CapabilityNotSupported: this database has no wakeups (the runtime polls).
            InvalidInput: bad queue names or timeout.
            StoreUnavailable: the listening connection cannot be opened.
        """
        wanted = rules.check_queues(queues)
        if not self._wakeups_supported():
            raise CapabilityNotSupported(
                f"{self._db.what} has no wakeups; poll claim_next with backoff"
            )
        seconds = check_wait_timeout(timeout)
        await self._ensure_ready()
        if self._watcher is not None:  # a SQLite file: any commit of another connection
            return await self._watcher.wait(seconds)
        if not self._listening:  # closed: a listener made now would never be closed
            return True
        return await self._listener().wait(wanted, seconds)

    async def wait_for_cancels(
        self, task_ids: Collection[str], timeout: float
    ) -> builtins.set[str]:
        """Wait until a task of ``task_ids`` is cancelled, by any process, or ``timeout``
        seconds pass (see ``TaskStore.wait_for_cancels``); the ids found cancelled. The
        collection is read again at each notification (PostgreSQL) or change of the file
        (SQLite), so the caller may add ids while waiting.

        Returns:
            The ids found cancelled; empty on timeout. A wait in progress when the store
            closes returns empty at once; one begun after ``aclose`` opens nothing and
            returns empty at its timeout (so a caller's loop never spins).

        Raises:
            CapabilityNotSupported: this database has no cancel wakeups (the worker
                learns of a cancel at its heartbeat).
            InvalidInput: ``timeout`` is not a finite number of seconds >= 0.
            StoreUnavailable: the listening connection cannot be opened.
        """
        if not self._wakeups_supported():
            raise CapabilityNotSupported(
                f"{self._db.what} has no cancel wakeups; the worker's heartbeat reads "
                "cancels"
            )
        seconds = check_wait_timeout(timeout)
        if not self._listening:  # closed: nothing will be heard, nothing is opened again
            await asyncio.sleep(seconds)
            return set()
        await self._ensure_ready()
        if self._watcher is not None:  # a SQLite file: read when it changes
            return await self._watcher.wait_for_cancels(task_ids, seconds)
        return await self._listener().wait_for_cancels(task_ids, seconds)

    def _listens(self) -> bool:
        """PostgreSQL with asyncpg: ``LISTEN``/``NOTIFY`` and the hot path."""
        return self._db.kind == "postgresql" and self._db.engine.dialect.driver == "asyncpg"

    def _wakeups_supported(self) -> bool:
        return self._listens() or self._watcher is not None

    def _listener(self) -> Listener:
        return self._of_this_loop(self._listeners, lambda: Listener(
            asyncpg_connector(self._db.engine, self._connect_args), self._channel,
            self._cancel_channel, self._cancelled_among))

    async def _cancelled_among(self, driver: Any, ids: list[str]) -> list[str]:
        """Which of ``ids`` are cancelled, read on the listening connection ``driver``
        (asyncpg: only ``PostgresStore`` listens, and overrides this)."""
        raise NotImplementedError

    def _of_this_loop(
        self, kept: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Kept],
        make: Callable[[], _Kept],
    ) -> _Kept:
        """What ``kept`` holds for the running event loop, made by ``make`` the first time
        (each loop its own: asyncio objects never cross loops)."""
        loop = asyncio.get_running_loop()
        with self._per_loop_lock:
            value = kept.get(loop)
            if value is None:
                value = kept[loop] = make()
            return value

    async def _notify(self, conn: AsyncConnection, queue: str) -> None:
        if self._listens():
            await conn.execute(sa.select(sa.func.pg_notify(self._channel, queue)))

    async def _notify_cancels(self, conn: AsyncConnection, task_ids: list[str]) -> None:
        if self._db.kind == "postgresql":  # (any driver: listeners may use another)
            ids = sa.func.unnest(
                sa.bindparam("ids", task_ids, type_=postgresql.ARRAY(sa.Text))
            ).table_valued("id").render_derived()
            await conn.execute(sa.select(sa.func.pg_notify(self._cancel_channel, ids.c.id)))

    async def aclose(self) -> None:
        """Stop listening (work waiters return ``True``, cancel waiters nothing) and
        dispose of the engine if the store created it (never one passed in).

        Raises:
            StoreUnavailable: closing a connection failed.
        """
        loop = asyncio.get_running_loop()
        with self._per_loop_lock:
            self._listening = False
            listeners = list(self._listeners.items())
            self._listeners.clear()
        if self._watcher is not None:
            self._watcher.close()
        for owner, listener in listeners:
            if owner is loop:
                await listener.close()
        await super().aclose()

