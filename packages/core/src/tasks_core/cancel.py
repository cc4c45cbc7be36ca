"""The cancellation token of one run: a cause, set once, read by the handler.

Cancellation is a token, never an exception injected into a thread. Four causes
(:class:`~tasks_core.reasons.CancelReason`: ``user``, ``timeout``, ``superseded``,
``shutdown``; :class:`CancelToken` says when each is set and how it is stored). The first
cause wins: later ones are ignored. Messages are rendered from the cause by
:func:`tasks_core.reasons.reason_error`, never passed in.
"""

from __future__ import annotations

import asyncio
import threading

from tasks_core.durations import MAX_WAIT_S, Seconds, check_duration
from tasks_core.reasons import CancelReason

__all__ = ["CancelToken", "RunCancelled"]


class RunCancelled(Exception):
    """The run was asked to stop (see ``TaskContext.cancel_reason``)."""

    def __init__(self, reason: CancelReason) -> None:
        super().__init__(f"The run was asked to stop: {CancelReason(reason).value}")
        self.reason = reason


class CancelToken:
    """A thread-safe, set-once cancellation cause.

    Async code awaits :meth:`wait`; sync code (handlers in threads) reads
    :attr:`cancelled` or blocks in :meth:`wait_sync`.

    ==============  ==========================================  ===============================
    cause           set when                                    stored as
    ==============  ==========================================  ===============================
    ``user``        a cancel request was recorded               ``cancelled`` "Cancelled by
                                                                user"
    ``timeout``     the run exceeded ``timeout``                ``failed`` ``TaskTimeout``
    ``superseded``  the run lost its lease (a new run of the    nothing: the old run's writes
                    key, or another worker took over)           are fenced by the lease
    ``shutdown``    the worker drains                           nothing: the task is released
    ==============  ==========================================  ===============================
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: CancelReason | None = None
        self._event: threading.Event | None = None  # made by the first wait_sync
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def reason(self) -> CancelReason | None:
        """The cause, or ``None`` while not cancelled."""
        return self._reason

    @property
    def cancelled(self) -> bool:
        """Whether a cause is set."""
        return self._reason is not None

    def cancel(self, reason: CancelReason) -> bool:
        """Set ``reason`` unless a cause is already set (the first cause wins).

        Returns:
            Whether this call set the cause.
        """
        reason = CancelReason(reason)
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            waiters, self._waiters = self._waiters, []
            event = self._event
        if event is not None:
            event.set()
        for loop, future in waiters:
            loop.call_soon_threadsafe(_wake, future)
        return True

    async def wait(self) -> CancelReason:
        """Wait until a cause is set and return it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._reason is None:
                self._waiters.append((loop, future))
            else:
                future.set_result(None)
        await future
        assert self._reason is not None
        return self._reason

    def wait_sync(self, timeout: Seconds | None = None) -> bool:
        """Block (in a thread) until a cause is set or ``timeout`` passes; ``True`` if set.

        Raises:
            InvalidInput: ``timeout`` is not ``None`` or a finite number in
                ``[0, MAX_WAIT_S]`` (see :mod:`tasks_core.durations`).
            RuntimeError: called where an event loop runs (an async handler), which it
                would block: ``await token.wait()`` there.
        """
        timeout = check_duration(timeout, "timeout", high=MAX_WAIT_S, allow_zero=True,
                                 allow_none=True)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("wait_sync would block this event loop: await token.wait()")
        with self._lock:
            if self._reason is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def __repr__(self) -> str:
        return f"CancelToken(reason={self._reason!r})"


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
