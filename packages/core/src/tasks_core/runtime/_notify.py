"""In-process change notifications between an ``App``'s clients and its workers.

Stores are polled by ``watch``; writes made through the same ``App`` (a submit, a cancel, a
worker's progress) also wake local watchers at once, and a cancel reaches a local worker at
once instead of at its next heartbeat. Thread-safe: waiters may live on any event loop.
An app holds one :class:`Notices` and hands it to its workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Changes", "Notices"]

log = logging.getLogger("tasks_core._notify")  # a stable name: logging configs refer to it

CancelListener = Callable[[str, str], None]
"""``f(task_id, run_id)``: a cancel of that run was recorded."""


class Changes:
    """A version counter with waiters, plus cancel listeners."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = 0
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._cancel_listeners: list[CancelListener] = []

    @property
    def version(self) -> int:
        """Bumped on every notification."""
        return self._version

    def notify(self) -> None:
        """Something changed: wake every waiter."""
        with self._lock:
            self._version += 1
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits there
                loop.call_soon_threadsafe(_wake, future)

    async def wait(self, since: int, timeout: float) -> bool:
        """Wait until the version moves past ``since`` or ``timeout`` passes.

        Returns:
            Whether a change was notified.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            if self._version != since:
                return True
            self._waiters.append(entry)
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    def add_cancel_listener(self, listener: CancelListener) -> None:
        """Call ``listener(task_id, run_id)`` after each cancel recorded through the app."""
        with self._lock:
            self._cancel_listeners.append(listener)

    def remove_cancel_listener(self, listener: CancelListener) -> None:
        """Stop calling ``listener``."""
        with self._lock:
            if listener in self._cancel_listeners:
                self._cancel_listeners.remove(listener)

    def cancelled(self, task_id: str, run_id: str) -> None:
        """A cancel of ``run_id`` of ``task_id`` was recorded."""
        with self._lock:
            listeners = list(self._cancel_listeners)
        for listener in listeners:
            try:
                listener(task_id, run_id)
            except Exception:
                log.exception("a cancel listener failed")
        self.notify()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(frozen=True)
class Notices:
    """What an app's clients and workers tell each other in this process."""

    changes: Changes = field(default_factory=Changes)
    """A task changed through this app (wakes ``watch``, ``wait`` and input waits); a
    cancel also reaches the cancel listeners (the app's workers)."""
    work: Changes = field(default_factory=Changes)
    """Work a local worker may claim now: a submit, an answer, a release."""
