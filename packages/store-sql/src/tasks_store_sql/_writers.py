"""A fair (FIFO) queue of writers: in front of one SQLite database (shared by every store
of this process that opens the same file), and in front of the creators' lock row of a
PostgreSQL or MariaDB namespace (per store).

Creators queued here hand the lock row on one after another; left alone, each would hold
a connection waiting for the row while the holder waits for the event loop behind them (a
convoy). SQLite admits one writer at a time; left alone, a process's writers would spin
on SQLite's busy handler and time each other out in no order. Rules: first come, first
served, across threads and event loops; a writer that waits longer than its timeout
(SQLite: ``busy_timeout``) gives up with ``StoreUnavailable`` before touching the database.
Between processes, the head of the queue then tries for the file's lock
(``Database.when_free``).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from tasks_core.errors import StoreUnavailable

__all__ = ["WriterQueue", "writer_queue"]


@dataclass(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    granted: bool = False


@dataclass(eq=False)
class WriterQueue:
    """A FIFO lock usable from any thread and event loop."""

    busy: str = "SQLite is busy: no write slot"
    """What the refusal after a timeout says (before "within …")."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _held: bool = False
    _waiters: deque[_Waiter] = field(default_factory=deque)

    @asynccontextmanager
    async def slot(self, timeout: float) -> AsyncIterator[None]:
        """Hold the write slot for the block.

        Raises:
            StoreUnavailable: no slot within ``timeout`` seconds (nothing was written).
        """
        await self._acquire(timeout)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._held and not self._waiters:
                self._held = True
                return
            waiter = _Waiter(loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), timeout)
        except BaseException as exc:
            with self._lock:
                granted = waiter.granted
                if not granted:
                    self._waiters.remove(waiter)
            if granted:
                if isinstance(exc, TimeoutError):
                    return  # the slot arrived just as we gave up: take it
                self._release()
                raise
            if isinstance(exc, TimeoutError):
                raise StoreUnavailable(
                    f"{self.busy} within {timeout:g}s; nothing was written"
                ) from None
            raise

    def _release(self) -> None:
        while True:
            with self._lock:
                if not self._waiters:
                    self._held = False
                    return
                waiter = self._waiters.popleft()
                waiter.granted = True
            try:
                waiter.loop.call_soon_threadsafe(_grant, waiter.future)
                return
            except RuntimeError:  # that event loop is closed: hand the slot on
                continue


def _grant(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_QUEUES: dict[str, WriterQueue] = {}
_QUEUES_LOCK = threading.Lock()


def writer_queue(key: str) -> WriterQueue:
    """The process-wide queue of the SQLite database ``key`` (its resolved path)."""
    with _QUEUES_LOCK:
        queue = _QUEUES.get(key)
        if queue is None:
            queue = _QUEUES[key] = WriterQueue()
        return queue
