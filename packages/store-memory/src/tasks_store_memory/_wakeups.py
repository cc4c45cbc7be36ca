"""``MemoryStore``'s in-process wakeups: workers waiting for work on their queues, and
runs waiting for the cancel of their tasks, on any thread or event loop.

:meth:`Wakeups.notify` and :meth:`Wakeups.notify_cancel` are called with the store lock
held (inside the write they report); the waits and :meth:`Wakeups.close` take it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection

__all__ = ["UNREPORTED_CANCELS", "Wakeups"]

UNREPORTED_CANCELS = 10_000
"""Cancels kept for the next ``wait_for_cancels`` when no waiter watched their task."""

_Waiter = tuple[frozenset[str], asyncio.AbstractEventLoop, "asyncio.Future[bool]"]
_CancelWaiter = tuple[Collection[str], asyncio.AbstractEventLoop, "asyncio.Future[set[str]]"]


class Wakeups:
    """The waiters of one store (see the module docstring)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._waiters: list[_Waiter] = []
        self._cancel_waiters: list[_CancelWaiter] = []
        self._unreported: dict[str, None] = {}
        """Cancelled tasks no waiter watched yet, oldest first (at most
        :data:`UNREPORTED_CANCELS`)."""

    def notify(self, queue: str) -> None:
        """Wake the waiters on ``queue``."""
        keep = []
        for queues, loop, future in self._waiters:
            if queue in queues:
                loop.call_soon_threadsafe(_resolve, future)
            else:
                keep.append((queues, loop, future))
        self._waiters = keep

    def notify_cancel(self, task_id: str) -> None:
        """Report the cancel of ``task_id`` to the waiters watching it, else keep it for
        the next wait."""
        keep = []
        for task_ids, loop, future in self._cancel_waiters:
            if task_id in task_ids:
                loop.call_soon_threadsafe(_resolve_with, future, {task_id})
            else:
                keep.append((task_ids, loop, future))
        if len(keep) == len(self._cancel_waiters):
            self._unreported[task_id] = None
            if len(self._unreported) > UNREPORTED_CANCELS:
                del self._unreported[next(iter(self._unreported))]
        self._cancel_waiters = keep

    async def wait_for_work(self, queues: frozenset[str], timeout: float) -> bool:
        """Wait for a wakeup on ``queues`` or ``timeout`` seconds (``False``)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        entry = (queues, loop, future)
        with self._lock:
            self._waiters.append(entry)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            return False
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    async def wait_for_cancels(self, task_ids: Collection[str], seconds: float) -> set[str]:
        """Wait until a task of ``task_ids`` is cancelled or ``seconds`` pass (an empty
        set); each cancel is reported once."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[set[str]] = loop.create_future()
        entry = (task_ids, loop, future)
        with self._lock:
            found = {task_id for task_id in list(task_ids) if task_id in self._unreported}
            if found:
                for task_id in found:
                    del self._unreported[task_id]
                return found
            self._cancel_waiters.append(entry)
        try:
            return await asyncio.wait_for(asyncio.shield(future), seconds)
        except TimeoutError:
            return set()
        finally:
            with self._lock:
                if entry in self._cancel_waiters:
                    self._cancel_waiters.remove(entry)

    def close(self) -> None:
        """Wake every waiter (the store is closing)."""
        with self._lock:
            for _, loop, future in self._waiters:
                loop.call_soon_threadsafe(_resolve, future)
            self._waiters.clear()
            for _, loop, cancel_future in self._cancel_waiters:
                loop.call_soon_threadsafe(_resolve_with, cancel_future, set())
            self._cancel_waiters.clear()



def _resolve(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(True)


def _resolve_with(future: asyncio.Future[set[str]], task_ids: set[str]) -> None:
    if not future.done():
        future.set_result(task_ids)
