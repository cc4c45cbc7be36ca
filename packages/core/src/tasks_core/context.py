"""``TaskContext``: what a handler receives as its first argument.

A handler is ``async def handler(ctx, **input)`` (run on the worker's event loop) or
``def handler(ctx, **input)`` (run in a thread of its own). Either way it runs in a fresh
``contextvars.Context``: it never sees the submitter's (or the worker's) context variables.

Handlers are deterministic up to their input requests: a run that waits for a person
longer than the worker's park time gives its slot back and is run again from the start
once the answer arrives; on that re-run ``request_input`` returns the stored answer at once
instead of asking again. ``request_input`` and ``sleep`` are for async handlers and must be
awaited: from a sync handler's thread they raise ``RuntimeError``, and read as a truth value
un-awaited (:class:`MustAwait`) ``TypeError`` — never a question passed for answered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Protocol, TypeVar

from tasks_core.authority import Owner
from tasks_core.cancel import CancelToken, RunCancelled
from tasks_core.durations import MAX_WAIT_S, Seconds, check_duration
from tasks_core.models import Progress, Snapshot
from tasks_core.reasons import CancelReason

__all__ = ["MustAwait", "TaskContext"]

T = TypeVar("T")


class MustAwait(Coroutine[Any, Any, T]):
    """What :meth:`TaskContext.request_input` and :meth:`TaskContext.sleep` return: a
    coroutine to await (``await``, ``asyncio.gather``, ``create_task`` all take it), which
    refuses to be read as a truth value — ``if ctx.request_input(...)`` without ``await``
    is always true, and would pass an unasked question for "approved".

    Raises:
        TypeError: from ``bool()`` (an ``if``, ``and``, ``not``): the call was not awaited.
    """

    def __init__(self, inner: Coroutine[Any, Any, T], what: str) -> None:
        self._inner = inner
        self._what = what

    def __await__(self) -> Generator[Any, None, T]:
        return self._inner.__await__()

    def send(self, value: Any) -> Any:
        return self._inner.send(value)

    def throw(self, *args: Any) -> Any:
        return self._inner.throw(*args)

    def close(self) -> None:
        self._inner.close()

    def __bool__(self) -> bool:
        self._inner.close()  # never run: nothing asked, no "never awaited" warning
        raise TypeError(f"ctx.{self._what}(...) must be awaited: await ctx.{self._what}(...)")


def _on_a_loop(what: str, sync_way: str) -> None:
    """Refuse a coroutine method of the context called from a sync handler's thread, where
    nothing would ever await it.

    Raises:
        RuntimeError: no event loop runs in this thread; naming ``sync_way``.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(f"ctx.{what} is for async handlers; in a sync handler use "
                           f"{sync_way}") from None


class _RunHooks(Protocol):
    """What the worker's run offers its context (see ``tasks_core.runtime._run``)."""

    loop: asyncio.AbstractEventLoop

    def progress(self, value: float, message: str | None) -> None: ...

    async def request_input(self, key: str, request: Any) -> Any: ...


class TaskContext:
    """The run as its handler sees it.

    Attributes:
        task_id: the task id.
        run_id: the run of the key this execution belongs to.
        name: the registered task name.
        queue: the queue it was claimed from.
        owner: the submitter (``None`` for ``System``).
        input: the input dict (``{}`` when none was given).
        attempt: 1 on the first run, +1 per application retry (a redelivery after a
            crash or a park is the same attempt).
        deliveries: how many times the task has been claimed, this claim included.
        idempotency_key: for side effects — the submitter's, else ``"<task_id>:<run_id>"``:
            the same for every attempt and redelivery of this run.
        token: the run's :class:`~tasks_core.cancel.CancelToken`.
    """

    def __init__(self, snapshot: Snapshot, token: CancelToken, hooks: _RunHooks) -> None:
        work = snapshot.work
        self.task_id: str = snapshot.id
        self.run_id: str = snapshot.run_id
        self.name: str = work.name
        self.queue: str = snapshot.queue
        self.owner: Owner | None = snapshot.owner
        self.input: dict[str, Any] = dict(work.input) if isinstance(work.input, dict) else {}
        self.attempt: int = snapshot.retry_count + 1
        self.deliveries: int = snapshot.deliveries
        self.idempotency_key: str = work.idempotency_key or f"{snapshot.id}:{snapshot.run_id}"
        self.token = token
        self._hooks = hooks

    # -- cancellation --------------------------------------------------------------------

    @property
    def cancel_requested(self) -> bool:
        """Whether the run was asked to stop (by a user, a timeout, a new run, a drain)."""
        return self.token.cancelled

    @property
    def cancel_reason(self) -> CancelReason | None:
        """Why: ``user``, ``timeout``, ``superseded`` or ``shutdown`` (``None`` if not)."""
        return self.token.reason

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~tasks_core.cancel.RunCancelled` if the run was asked to stop.

        Stopping this way for a ``shutdown`` releases the task for another worker; returning
        a value instead records it as the result.

        Raises:
            RunCancelled: with ``.reason``.
        """
        reason = self.token.reason
        if reason is not None:
            raise RunCancelled(reason)

    def sleep(self, seconds: Seconds) -> MustAwait[None]:
        """Sleep ``seconds``, or end with the run's cancellation, whatever its cause
        (``await ctx.sleep(...)``; async handlers only).

        Like any await point of a cancelled run, it does not return once the run is asked
        to stop: a loop of ``await ctx.sleep(...)`` ends there, so a drained run is
        released (and runs again elsewhere) instead of rushing to its end.

        Raises:
            RunCancelled: the run was asked to stop (``.reason``: ``user``, ``timeout``,
                ``superseded`` or ``shutdown``), before or during the sleep.
            InvalidInput: ``seconds`` is not a finite number in ``[0, MAX_WAIT_S]`` (see
                :mod:`tasks_core.durations`): nothing slept.
            RuntimeError: called from a sync handler (use ``ctx.token.wait_sync``).
            TypeError: read as a truth value instead of awaited (:class:`MustAwait`).
        """
        _on_a_loop("sleep", "ctx.token.wait_sync(seconds)")
        return MustAwait(self._sleep(seconds), "sleep")

    async def _sleep(self, seconds: Seconds) -> None:
        checked = check_duration(seconds, "seconds", high=MAX_WAIT_S, allow_zero=True)
        self.raise_if_cancelled()
        with contextlib.suppress(TimeoutError):
            await self._as_run_cancelled(asyncio.wait_for(self.token.wait(), checked))
        self.raise_if_cancelled()

    async def _as_run_cancelled(self, waiting: Awaitable[T]) -> T:
        """Await a waiting helper's ``waiting``: a cancel of the handler's task while the
        token holds a cause is the run's stop (the worker sets the token, then cancels an
        async handler, and the cancel may land first), so it ends as ``RunCancelled`` with
        that cause — the task taken out of its cancelling state — as the token's wakeup
        would have; any other cancel stays ``CancelledError``.

        Raises:
            RunCancelled: the run was asked to stop.
        """
        try:
            return await waiting
        except asyncio.CancelledError:
            reason, task = self.token.reason, asyncio.current_task()
            if reason is None or task is None:
                raise
            task.uncancel()
            raise RunCancelled(reason) from None

    # -- progress ------------------------------------------------------------------------

    def progress(self, value: float, message: str | None = None) -> None:
        """Report progress 0–100 (throttled: the store sees the latest value at most every
        ``progress_interval`` seconds) with an optional message, text cut to its first 1024
        characters. Safe from async and sync handlers alike; never blocks.

        Raises:
            InvalidInput: ``value`` outside 0..100 or not finite; a message that is not
                text (or holds a lone surrogate).
        """
        progress = Progress(value=value, message=message)
        self._hooks.progress(progress.value, progress.message)

    # -- input requests ------------------------------------------------------------------

    def request_input(self, key: str, request: Any = None) -> MustAwait[Any]:
        """Ask a person for input under ``key`` and wait for the answer (``await
        ctx.request_input(...)``; async handlers only, sync ones use
        :meth:`request_input_sync`).

        On a re-run the stored answer is returned at once, without asking again. The wait
        does not count against the task's timeout. After the worker's park time the run
        gives its slot back (the task waits in ``waiting_input``, holding no worker) and is
        run again from the start when the answer arrives.

        Args:
            key: the question's key; each key is asked at most once per task.
            request: JSON describing the question (shown to whoever answers).

        Returns:
            The accepted answer.

        Raises:
            RunCancelled: the task was cancelled or the run lost its lease while waiting.
            InvalidInput: a bad key, or a request that is not plain JSON or is larger
                than ``Limits.max_input_bytes`` (checked as ``submit`` checks its input),
                before anything is written.
            RuntimeError: called from a sync handler (nothing asked).
            TypeError: read as a truth value instead of awaited (nothing asked).
        """
        _on_a_loop("request_input", "ctx.request_input_sync(key, request)")
        return MustAwait(self._as_run_cancelled(self._hooks.request_input(key, request)),
                         "request_input")

    def request_input_sync(self, key: str, request: Any = None) -> Any:
        """:meth:`request_input` for sync handlers (blocks the handler's thread).

        Raises:
            RunCancelled, InvalidInput: as :meth:`request_input`.
            RuntimeError: called on the worker's event loop (use ``await request_input``).
        """
        loop = self._hooks.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("request_input_sync is for sync handlers; await request_input")
        future = asyncio.run_coroutine_threadsafe(self._hooks.request_input(key, request), loop)
        return future.result()

    def __repr__(self) -> str:
        return f"TaskContext(task_id={self.task_id!r}, name={self.name!r}, attempt={self.attempt})"
