"""One run: a claimed task executed by its handler, from claim to the last write.

:class:`Run` is the lifecycle and the supervision of the handler; its bases hold the
state (``_run_base``), the writes (``_run_writes``), heartbeat and progress
(``_run_helpers``) and input requests (``_run_input``). Supervision is by callbacks, not
by a task: the handler ends; or the token gets ``user``/``superseded`` (stop waiting: the
store already says what happened); or the timeout's timer fires (``failed``,
``TaskTimeout``). A run that stopped waiting writes the rest of its slot in a task of its
own; the handler's late outcome is still written with the old lease, which the store
fences off (``LeaseLost``) or ignores (``unchanged``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable
from typing import Any

from tasks_core import telemetry
from tasks_core.cancel import RunCancelled
from tasks_core.context import TaskContext
from tasks_core.definitions import TaskDef
from tasks_core.errors import LeaseLost, TasksError
from tasks_core.events import Failed
from tasks_core.reasons import WORKER_LOST_MESSAGE, CancelReason, reason_error, timeout_message
from tasks_core.runtime._run_base import RunEnv, _Outcome
from tasks_core.runtime._run_input import RunInput
from tasks_core.runtime._run_writes import UNRECOVERABLE

__all__ = ["UNRECOVERABLE", "Run", "RunEnv"]

log = logging.getLogger("tasks_core.worker")


class Run(RunInput):
    """One claim being executed. :meth:`execute`, while the worker holds a slot:

    1. a drain already started: release the claim; a claim the worker held long
       (``recheck``) is read again, and a run cancelled or taken over meanwhile never starts;
    2. ``recover="fail"`` and the claim took over an expired lease: ``failed``
       ("Worker process terminated unexpectedly");
    3. an unknown task name: ``failed`` (``UnknownTask``), never retried;
    4. arm the heartbeat, run the handler (async: awaited in the run's own task, started in
       a fresh ``contextvars.Context``; sync: in a thread of its own, in a fresh context
       too) and supervise it; time spent waiting for input does not count against the
       timeout, and a ``shutdown`` token does not stop the wait (the drain bounds it);
    5. write the outcome with the lease (:mod:`~tasks_core.runtime._run_writes`).
    """

    # -- the lifecycle -------------------------------------------------------------------

    async def execute(self) -> None:
        """Run the claim to the end of its slot (see the module docstring)."""
        try:
            await self._execute()
        except asyncio.CancelledError:
            self.abandon()
            raise
        finally:
            if self._span is not None:
                self._span.end(self._ran_for)

    async def _execute(self) -> None:
        claim = self.snapshot.claim
        if self.env.stopping():
            await self._release("the worker is shutting down; released before start")
            return
        if self.recheck and not await self._still_wanted():
            return
        if self.env.recover == "fail" and claim is not None and claim.recovered:
            log.warning("task %r: took over an expired lease; failing it (recover='fail')",
                        self.task_id)
            await self._write(Failed(event_id=self.event_id("worker-lost"), error="WorkerLost",
                                     message=WORKER_LOST_MESSAGE))
            return
        if claim is not None and claim.recovered:
            log.warning("task %r: recovered from an expired lease (delivery %d)",
                        self.task_id, self.snapshot.deliveries)
        if self.task is None:
            log.warning("task %r: no task named %r is registered in this worker; failing it "
                        "(UnknownTask)", self.task_id, self.snapshot.work.name)
            await self._write(Failed(event_id=self.event_id("unknown-task"), error="UnknownTask",
                                     message=f"No task named {self.snapshot.work.name!r} is "
                                             "registered in this worker"))
            return
        log.debug("task %r: running %s (attempt %d, delivery %d)", self.task_id, self.task.name,
                 self.snapshot.retry_count + 1, self.snapshot.deliveries)
        self._start_helpers()
        outcome = await self._run_handler(self.task)
        if not self._stopped:
            timeout = self.snapshot.work.timeout_s
            # An async handler that never awaits blocks the loop past its timeout, so
            # nothing could stop it in time: it timed out all the same.
            if (timeout is not None and self._ran_for > timeout and self.token.reason is None
                    and self.token.cancel(CancelReason.TIMEOUT)):
                self._stop_early()
        if self._stopped:
            if self._early is None:  # a limited queue's run waited for its handler
                await self._stopped_early()
            await self._late(outcome)
            return
        await self._stop_helpers_gracefully(flush=True)
        await self._finish(outcome)

    async def _still_wanted(self) -> bool:
        """Read the task with the lease: ``False`` (nothing started) when it was cancelled
        or taken over meanwhile; a failed read leaves it to the heartbeat."""
        try:
            snapshot = await self.cell.snapshot()
        except LeaseLost:
            self.lost()
            return False
        except TasksError:
            return True
        self.observe(snapshot)
        if self.token.reason == CancelReason.USER:
            log.info("task %r: cancelled while its claim was held; not started", self.task_id)
            await self._release("cancelled while held", "cancelled")
            return False
        return self.token.reason is None


    # -- the handler and its supervision -------------------------------------------------

    async def _run_handler(self, task: TaskDef) -> _Outcome:
        """Run the handler to its end (async: here, in the run's task; sync: in a thread)
        while the callbacks below supervise it; its outcome.

        Raises:
            asyncio.CancelledError: the run's task was cancelled by someone else than this
                run (the worker died): nothing is written.
        """
        ctx = TaskContext(self.snapshot, self.token, self)
        args, kwargs = _arguments(self.snapshot.work.input)
        self.started = True
        if telemetry.active is not None:
            self._span = telemetry.active.run(self.snapshot)
            if task.is_async:
                self._span.activate()  # in the run's own task and context
        self._started_at = self.loop.time()
        self._in_handler = True
        self._arm()
        try:
            if task.is_async:
                outcome = await _call_async(task.fn, ctx, args, kwargs)
            else:
                future: asyncio.Future[_Outcome] = self.loop.create_future()
                fresh = contextvars.Context()
                if self._span is not None:
                    self._span.activate_in(fresh)
                thread = threading.Thread(
                    target=_thread_main,
                    args=(self.loop, future, fresh, task.fn, ctx, args, kwargs),
                    name=f"tasks:{task.name}:{self.task_id}",
                    daemon=True,
                )
                thread.start()
                outcome = await future
        finally:
            self._in_handler = False
            self._ran_for = self._active_time()
            self._disarm()
        if self._cancel_asked and self.runner is not None:
            self.runner.uncancel()
        elif isinstance(outcome.error, asyncio.CancelledError) and (
            self.dead or (self.runner is not None and self.runner.cancelling())
        ):
            raise outcome.error
        return outcome

    def _active_time(self) -> float:
        now = self.loop.time()
        waiting = now - self._wait_since if self._wait_since is not None else 0.0
        return now - self._started_at - self._waited - waiting

    def _review(self) -> None:
        """Supervise the running handler (after a stop cause, an input wait's start or
        end): a ``user`` or ``superseded`` cause stops waiting for it; otherwise the
        timeout's timer is set for the handler's time left."""
        if not self._in_handler or self._stopped:
            return
        if self.token.reason in (CancelReason.USER, CancelReason.SUPERSEDED):
            self._stop_early()
            return
        self._arm()

    def _arm(self) -> None:
        """Set the timeout's timer for the handler's own time left: none without a
        timeout, while waiting for input, or once the token holds a cause."""
        self._disarm()
        timeout = self.snapshot.work.timeout_s
        if timeout is None or self.token.reason is not None or self._wait_since is not None:
            return
        self._timer = self.loop.call_later(max(0.0, timeout - self._active_time()),
                                           self._timed_out)

    def _timed_out(self) -> None:
        self._timer = None
        if not self._in_handler or self._stopped:
            return
        timeout = self.snapshot.work.timeout_s or 0.0
        if self._wait_since is None and self._active_time() < timeout:
            self._arm()  # the timer fired early (the loop's clock resolution)
        elif self.token.cancel(CancelReason.TIMEOUT):
            self._stop_early()
        else:
            self._review()

    def _stop_early(self) -> None:
        """Stop waiting for the handler: the rest of the slot goes to a task of its own;
        an async handler is cancelled at its await point (never while it runs: the
        cancel waits for the loop), and this run's task waits for its late outcome.

        On a queue with a fleet-wide ``max_running`` a timeout or a cancel stops nothing
        yet: the run keeps its slot and renews its lease until the handler returns (a
        thread cannot be stopped, and the queue's next task must not start beside it);
        :meth:`_execute` then writes what the stop writes."""
        self._stopped = True
        self._disarm()
        if self._in_handler and self.task is not None and self.task.is_async:
            self.loop.call_soon(self._cancel_handler)
        if (self.snapshot.queue in self.env.limited
                and self.token.reason != CancelReason.SUPERSEDED):
            log.info("task %r: stopped (%s); queue %r holds its lease until the handler "
                     "returns", self.task_id, self.token.reason, self.snapshot.queue)
            return
        self._early = self.env.finish_early(self, self._stopped_early())

    def _cancel_handler(self) -> None:
        if self._in_handler and self.runner is not None and not self.dead:
            self._cancel_asked = True
            self.runner.cancel()

    async def _stopped_early(self) -> None:
        await self._stop_helpers_gracefully(flush=False)
        reason = self.token.reason
        if reason == CancelReason.TIMEOUT:
            timeout = self.snapshot.work.timeout_s or 0.0
            error, _ = reason_error(CancelReason.TIMEOUT, timeout=timeout)
            log.warning("task %r: timed out after %gs", self.task_id, timeout)
            await self._write(Failed(event_id=self.event_id("timeout"), error=error,
                                     message=timeout_message(timeout), reason="timeout"))
        elif reason == CancelReason.USER:
            await self._release("cancelled by user", "cancelled")

    async def _late(self, outcome: _Outcome) -> None:
        """Write the handler's late outcome with the old lease, after the stopped run's
        own write: it is fenced off."""
        if self._early is not None:
            await asyncio.wait([self._early])
        error = outcome.error
        if isinstance(error, (RunCancelled, asyncio.CancelledError)) or self.dead:
            return
        log.info("task %r: the handler of a stopped run (%s) ended; writing its late outcome "
                 "with the old lease", self.task_id, self.token.reason)
        await self._finish(outcome, late=True)


def _arguments(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if value is None:
        return (), {}
    if isinstance(value, dict):
        return (), dict(value)
    return (value,), {}


async def _call_async(
    fn: Callable[..., Any], ctx: TaskContext, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> _Outcome:
    try:
        return _Outcome(value=await fn(ctx, *args, **kwargs))
    except BaseException as exc:  # every outcome is data; the worker decides what it means
        return _Outcome(error=exc)


def _call_sync(
    fn: Callable[..., Any], ctx: TaskContext, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> _Outcome:
    try:
        return _Outcome(value=fn(ctx, *args, **kwargs))
    except BaseException as exc:
        return _Outcome(error=exc)


def _thread_main(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[_Outcome],
    fresh: contextvars.Context,
    fn: Callable[..., Any],
    ctx: TaskContext,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    outcome = fresh.run(_call_sync, fn, ctx, args, kwargs)
    with contextlib.suppress(RuntimeError):  # the loop is gone: the process is exiting
        loop.call_soon_threadsafe(_settle, future, outcome)


def _settle(future: asyncio.Future[_Outcome], outcome: _Outcome) -> None:
    if not future.done():
        future.set_result(outcome)

