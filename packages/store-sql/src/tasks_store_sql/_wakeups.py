"""PostgreSQL wakeups: ``NOTIFY`` on commit, ``LISTEN`` on one dedicated connection.

Every write that may make work claimable runs ``pg_notify(work channel, queue)`` in its
transaction, and every transition that ends ``cancelled`` ``pg_notify(cancel channel,
task id)``; PostgreSQL delivers them on commit, never for a rolled-back transaction.
Rules: each event loop that waits gets one listening connection (asyncpg delivers to the
loop that owns it), opened outside its pool and in a task a waiter's cancellation does
not reach; a notification no waiter takes is kept for the next wait; a lost connection
wakes every waiter (a spurious wakeup costs one empty poll) and is reopened by the next
wait. How waiters are answered: :class:`Listener`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from tasks_store_sql._errors import DRIVER_ERRORS, connect_arguments, translate
from tasks_store_sql._options import driver_params

__all__ = ["UNREPORTED", "Listener", "asyncpg_connector", "cancel_channel_of", "channel_of"]

Connector = Callable[[], Awaitable[Any]]
Check = Callable[[Any, list[str]], Awaitable[Iterable[str]]]
"""Which of the ids are cancelled, read on the listening (asyncpg) connection."""

log = logging.getLogger("tasks_store_sql")
CLOSE_TIMEOUT = 5.0
"""Seconds ``close`` waits for a listening connection to close, or to finish opening."""
UNREPORTED = 10_000
"""Cancels kept for the next cancel wait when no waiter held their task (most recent)."""


def channel_of(prefix: str) -> str:
    """The notification channel of a namespace."""
    return f"tasks_{prefix}work"


def cancel_channel_of(prefix: str) -> str:
    """The cancel channel of a namespace (payload: the task id)."""
    return f"tasks_{prefix}cancel"


class Listener:
    """One listening connection and the waiters of one event loop.

    Work waiters are woken by queue name; a notification that finds no waiter for its
    queue wakes the next one at once (it may have come while a worker was busy claiming).
    A cancel waiter holds the caller's live collection of ids and is answered with an id
    a notification names while it holds it; a cancel no waiter holds is kept (the
    :data:`UNREPORTED` most recent) for the next wait that holds it. A cancel committed
    before the connection listened is heard by no notification, so the first cancel wait
    on each new connection reads its ids' status once, after ``LISTEN``. A lost
    connection answers cancel waiters with nothing (the next wait reconnects and reads).

    The connection opens in a task of its own: asyncpg cancelled mid-open leaves a future
    it never reads ("Future exception was never retrieved"). The next wait adopts a
    connection opened that way; ``close`` waits for one being opened and closes it.
    """

    def __init__(
        self, connect: Connector, channel: str, cancel_channel: str,
        check: Check | None = None,
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._cancel_channel = cancel_channel
        self._check = check
        self._driver: Any = None
        self._opening_task: asyncio.Task[Any] | None = None
        """The listening connection being opened (outliving a cancelled waiter)."""
        self._waiters: list[tuple[frozenset[str], asyncio.Future[bool]]] = []
        self._opening = asyncio.Lock()
        self._closed = False
        self._missed: set[str] = set()
        """Queues notified while no waiter listened for them (a worker that was busy
        claiming would otherwise sleep through that work until its poll timeout)."""
        self._cancel_waiters: list[tuple[Collection[str], asyncio.Future[set[str]]]] = []
        self._unreported: dict[str, None] = {}
        """Cancelled tasks no waiter held, oldest first (at most :data:`UNREPORTED`)."""
        self._checked = False
        """Whether a cancel wait read its ids' status on the current connection."""
        self._checking = asyncio.Lock()  # (one query at a time on the connection)

    async def wait(self, queues: frozenset[str], timeout: float) -> bool:
        """Wait until a notification names one of ``queues`` or ``timeout`` passes.

        Raises:
            StoreUnavailable: the listening connection cannot be opened.
        """
        if self._closed:
            return True
        await self._listen()
        if self._missed & queues:  # work arrived while nobody was waiting (mid-claim)
            self._missed -= queues
            return True
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (queues, future)
        self._waiters.append(entry)
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(timeout, 0))
        except TimeoutError:
            return False
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    async def wait_for_cancels(self, task_ids: Collection[str], timeout: float) -> set[str]:
        """The ids of ``task_ids`` (read at each notification) cancelled since this
        connection listens and not yet reported, at once; else the first ones notified
        before ``timeout`` passes (empty: none, the connection was lost or closed).

        Raises:
            StoreUnavailable: the listening connection cannot be opened.
        """
        if self._closed:
            return set()
        driver = await self._listen()
        ids = list(task_ids)
        found: set[str] = set()
        if not self._checked and ids and self._check is not None:
            async with self._checking:  # (cancels committed before LISTEN took effect)
                if self._closing():  # (``close`` takes the connection once this is done)
                    return set()
                with translate("PostgreSQL"):
                    found.update(await self._check(driver, ids))
            self._checked = True
            if self._closing():
                return set()
        found.update(task_id for task_id in ids if task_id in self._unreported)
        if found:
            for task_id in found:
                self._unreported.pop(task_id, None)
            return found
        future: asyncio.Future[set[str]] = asyncio.get_running_loop().create_future()
        entry = (task_ids, future)
        self._cancel_waiters.append(entry)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:  # (answered in the same turn as the timeout: not lost)
            return future.result() if future.done() else set()
        finally:
            if entry in self._cancel_waiters:
                self._cancel_waiters.remove(entry)

    def _closing(self) -> bool:
        """Whether ``close`` began (read again after an await)."""
        return self._closed

    async def _listen(self) -> Any:
        """The listening connection, opened (or adopted) when there is none."""
        async with self._opening:
            if self._driver is not None and not self._driver.is_closed():
                return self._driver
            await self._drop()
            opening = self._opening_task
            if opening is None:
                opening = self._opening_task = asyncio.ensure_future(self._open())
                opening.add_done_callback(_retrieved)
            try:
                with translate("PostgreSQL"):
                    # (shielded: a cancelled waiter leaves the opening to finish, for the
                    # next wait or ``close`` to take)
                    driver = await asyncio.shield(opening)
            finally:
                if opening.done():  # opened or failed: the next wait starts afresh
                    self._opening_task = None
            self._driver = driver
            self._checked = False  # a new connection: cancels before it are unheard
            return driver

    async def _open(self) -> Any:
        driver = await self._connect()
        try:
            await driver.add_listener(self._cancel_channel, self._on_cancel)
            await driver.add_listener(self._channel, self._on_notify)
        except BaseException:
            await driver.close()
            raise
        driver.add_termination_listener(self._on_lost)
        return driver

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        woke = False
        for queues, future in list(self._waiters):
            if payload in queues and not future.done():
                future.set_result(True)
                woke = True
        if not woke:  # nobody waits on that queue right now: the next waiter hears it
            self._missed.add(payload)

    def _on_cancel(self, _conn: Any, _pid: int, _channel: str, task_id: str) -> None:
        reported = False
        for task_ids, future in list(self._cancel_waiters):
            if task_id in task_ids:
                if not future.done():
                    future.set_result({task_id})
                elif not future.cancelled():  # answered, not yet resumed: one more
                    future.result().add(task_id)
                reported = True
        if not reported:  # nobody holds that task right now: the next wait that does
            self._unreported.pop(task_id, None)
            self._unreported[task_id] = None
            if len(self._unreported) > UNREPORTED:
                del self._unreported[next(iter(self._unreported))]

    def _on_lost(self, _conn: Any) -> None:
        log.warning("the PostgreSQL wakeup connection was lost; it reopens on the next wait")
        self._driver = None
        self._wake_all()

    def _wake_all(self) -> None:
        for _, future in list(self._waiters):
            if not future.done():
                future.set_result(True)
        for _, cancels in list(self._cancel_waiters):
            if not cancels.done():
                cancels.set_result(set())

    async def _drop(self) -> None:
        driver, self._driver = self._driver, None
        if driver is not None:
            with contextlib.suppress(*DRIVER_ERRORS, RuntimeError):
                driver.remove_termination_listener(self._on_lost)  # closing is no loss
                await driver.close(timeout=CLOSE_TIMEOUT)

    async def close(self) -> None:
        """Stop listening and wake every waiter (work waiters return ``True``, cancel
        waiters nothing); a listening connection still being opened is waited for and
        closed."""
        self._closed = True
        self._wake_all()
        async with self._opening:
            opening, self._opening_task = self._opening_task, None
            if opening is not None:
                await asyncio.wait({opening}, timeout=CLOSE_TIMEOUT)
                if not opening.done():  # a server that does not answer: give up on it
                    opening.cancel()
                    await asyncio.wait({opening})
                if not opening.cancelled() and opening.exception() is None:
                    self._driver = opening.result()
            async with self._checking:  # (a status read in flight ends first)
                await self._drop()


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark the outcome of an opening as read (a waiter that was cancelled never reads
    it; the next wait, which would, may never come)."""
    if not task.cancelled():
        task.exception()


_SQLALCHEMY_ONLY = ("prepared_statement_cache_size", "prepared_statement_name_func",
                    "async_creator_fn")


def asyncpg_connector(engine: AsyncEngine, connect_args: Mapping[str, Any]) -> Connector:
    """Opens a plain asyncpg connection to the database of ``engine`` (outside its pool:
    a listening connection lives as long as the store)."""

    async def connect() -> Any:
        import asyncpg  # type: ignore[import-untyped,unused-ignore]

        args, params = engine.dialect.create_connect_args(engine.url)
        params.update(connect_args)
        for name in _SQLALCHEMY_ONLY:  # taken by SQLAlchemy's adapter, not by asyncpg
            params.pop(name, None)
        with connect_arguments("PostgreSQL"):
            return await asyncpg.connect(*args, **driver_params("asyncpg", dict(params)))

    return connect
