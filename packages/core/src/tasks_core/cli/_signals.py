"""SIGTERM and SIGINT during ``tasks worker``: the first drains, a second exits at once.

The handlers are installed when the command starts and removed only when it returns —
after the app has closed its store — so no signal in between meets the default action
(which would end the process with 143, not the documented 130). In the console script
(:func:`exit_at_once_after_the_command`) a second signal once the command only closes, or
any after it returned, exits the process at once with 130; the process ends after the exit
hooks without the interpreter's finalization, which gives signals their default action.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any

__all__ = ["EXIT_INTERRUPTED", "Interrupts", "command_returned",
           "exit_at_once_after_the_command"]

log = logging.getLogger("tasks_core.cli")

EXIT_INTERRUPTED = 130
"""The exit code of a command that a second signal cut short."""

SIGNALS = (signal.SIGTERM, signal.SIGINT)

_current: ContextVar[Interrupts | None] = ContextVar("tasks_cli_interrupts", default=None)
_then_exit_at_once = False
"""Whether :meth:`Interrupts.installed` leaves a handler that exits at once when it ends
(the console script's process ends right after the command)."""


_returned: int | None = None
"""The console script's exit code, once its command returned."""


def exit_at_once_after_the_command() -> None:
    """Make a SIGTERM/SIGINT after the command returned — while the interpreter ends
    (threads joined, ``atexit`` hooks) — exit the process at once with 130 instead of
    meeting the default action, and end the process after the exit hooks registered from
    now on (:func:`_end_unfinalized`). For the console script only: the handler outlives
    the command."""
    global _then_exit_at_once
    _then_exit_at_once = True
    atexit.register(_end_unfinalized)  # registered first: runs after every later hook


def command_returned(code: int) -> int:
    """Note the exit code of the console script's command (returned as it is), for
    :func:`_end_unfinalized`."""
    global _returned
    _returned = code
    return code


def _end_unfinalized() -> None:
    """The console script's last exit hook: log handlers flushed and closed, output
    flushed, then the process ends with the command's code — without the interpreter's
    finalization, whose steps run with SIGTERM/SIGINT at their default action (a second
    signal there ended the process with 143 and no log line; objects' ``__del__`` at
    module teardown took that window up to a second). Nothing when the command never
    returned (an exception is on its way: the normal exit reports it)."""
    if _returned is None:
        return
    logging.shutdown()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(_returned)


def _exit_interrupted(signum: int, frame: object) -> None:
    with contextlib.suppress(Exception):  # what is buffered, as far as it goes
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(EXIT_INTERRUPTED)


class Interrupts:
    """The SIGTERM/SIGINT handling of one command, bound to the task that installed it.

    The first signal calls the callback given to :meth:`on_first` (the drain) — at once,
    or as soon as one is given. Every later signal cancels that task and every task given
    to :meth:`cut_short`; :meth:`exit_code` turns that cancellation into
    :data:`EXIT_INTERRUPTED`.
    """

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.signals = 0
        self._task = task
        self._first: Callable[[], None] | None = None
        self._also: list[asyncio.Task[Any]] = []
        self._cancels = 0
        self._closing = False

    @classmethod
    @contextlib.contextmanager
    def installed(cls) -> Iterator[Interrupts]:
        """Handle SIGTERM and SIGINT on the running loop until the block exits, then give
        them back their default action. Inside a block already handling them (the worker
        command inside ``tasks``' own), the same handling, left installed for the outer
        block to remove. Where the loop cannot handle signals (not the main thread,
        Windows), nothing is installed and signals keep their default action.

        Raises:
            RuntimeError: no task is running.
        """
        outer = _current.get()
        if outer is not None:
            yield outer
            return
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Interrupts.installed() needs a running task")
        interrupts = cls(task)
        loop = asyncio.get_running_loop()
        for signum in SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, interrupts._received, signum)
        token = _current.set(interrupts)
        try:
            yield interrupts
        finally:
            _current.reset(token)
            for signum in SIGNALS:
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(signum)
                    if _then_exit_at_once:
                        signal.signal(signum, _exit_interrupted)

    def on_first(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` on the first signal — now, if it has arrived already;
        ``None``: nothing more to do on a first signal."""
        self._first = callback
        if callback is not None and self.signals == 1:
            callback()

    def closing(self) -> None:
        """The command's work has ended and it only closes now (the drain's end, the
        store's close): in the console script a later signal exits the process at once
        with 130 rather than cancel the close half-way (a driver's connections cancelled
        while closing logged tracebacks); elsewhere it cancels as before."""
        self._closing = True

    def cut_short(self, task: asyncio.Task[Any]) -> None:
        """Cancel ``task`` too on a second signal."""
        self._also.append(task)

    @property
    def interrupted(self) -> bool:
        """Whether a second signal arrived."""
        return self.signals > 1

    async def exit_code(self, work: Awaitable[int]) -> int:
        """``work``'s exit code, or :data:`EXIT_INTERRUPTED` when a second signal cut it
        short (the cancellation is consumed; one from elsewhere is not).

        Raises:
            asyncio.CancelledError: the task was cancelled by something else.
        """
        try:
            return await work
        except asyncio.CancelledError:
            if not self._cancels:
                raise
            for _ in range(self._cancels):
                self._task.uncancel()
            self._cancels = 0
            if self._task.cancelling():
                raise
            return EXIT_INTERRUPTED

    def _received(self, signum: int) -> None:
        """The signal handler: first signal, drain; any later one, exit at once."""
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            log.info("received %s: %s (again to exit at once)", name,
                     "draining" if self._first is not None
                     else "draining as soon as the worker serves")
            if self._first is not None:
                self._first()
            return
        log.warning("received %s again: exiting at once", name)
        if self._closing and _then_exit_at_once:
            _exit_interrupted(signum, None)
        for task in self._also:
            task.cancel()
        self._cancels += 1
        self._task.cancel()
