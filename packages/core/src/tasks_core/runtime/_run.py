"""One run: a claimed task executed by its handler, from claim to the last write.

Lifecycle of :meth:`Run.execute` (the worker holds a slot for its duration):

1. a drain already started → release the claim (nothing lost, nothing cancelled); a
   claim the worker held long (``recheck``) is read again with its lease, and a run of a
   task cancelled or taken over meanwhile never starts;
2. ``recover="fail"`` and the claim took over an expired lease → ``failed``
   ("Worker process terminated unexpectedly");
3. an unknown task name → ``failed`` (``UnknownTask``), never retried;
4. start the heartbeat (renew every ``lease/3``, the first started by the worker's one
   timer, :mod:`tasks_core.runtime._heartbeats`; a renew showing ``cancelled`` sets the token to
   ``user``, ``LeaseLost`` or another ``run_id`` to ``superseded``) and the
   throttled progress writer; run the handler (async: awaited in the run's own task, which
   the worker starts in a fresh ``contextvars.Context``; sync: in a thread of its own,
   in a fresh context too);
5. supervise, by callbacks, not by a task: the handler ends; or the token gets
   ``user``/``superseded`` (stop waiting: the stored state already says what happened);
   or the timeout's timer fires (set ``timeout``, write ``failed``/``TaskTimeout``). Time
   spent waiting for input does not count. A ``shutdown`` token does not stop the wait:
   the drain bounds it. A run that stops waiting hands the rest of its slot (the timeout's
   write, or the release after a cancel) to a task of its own
   (``RunEnv.finish_early``); an async handler is cancelled at its await point, and the
   run's task goes on waiting for it, to write its late outcome;
6. write the outcome with the lease: ``completed``; ``retry_requested`` for an exception
   or ``Retry``; ``failed`` at once for ``MemoryError``, ``RecursionError``,
   ``KeyboardInterrupt``, ``SystemExit`` or a result that is not JSON; a release for a
   parked run or a run that stopped with an error for a ``shutdown``. On a store with
   ``batch_transitions`` the outcome goes through the worker's group commit
   (:mod:`tasks_core.runtime._group`), and the worker slot is given back as soon as the handler
   is done (the lease is held until the group commits).

A run that stopped waiting early frees its slot when that task ends; the handler's late
outcome is still written with the old lease, which the store refuses (``LeaseLost``:
fenced off) or ignores (``unchanged`` on a finished task). Event ids are
``"<run_id>:<generation>:<step>"``: the same for every retry of one write.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
import threading
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tasks_core._json import check_json, json_size
from tasks_core.authority import check_key
from tasks_core.cancel import CancelToken, RunCancelled
from tasks_core.context import TaskContext
from tasks_core.definitions import Retry, TaskDef
from tasks_core.errors import InvalidInput, LeaseLost, StoreUnavailable, TasksError
from tasks_core.events import (
    Completed,
    Event,
    Failed,
    InputRequested,
    RetryRequested,
    Transition,
)
from tasks_core.models import Claim, Snapshot, TaskStatus
from tasks_core.reasons import WORKER_LOST_MESSAGE, CancelReason, reason_error, timeout_message
from tasks_core.runtime._failures import log_failure
from tasks_core.runtime._group import GroupCommit
from tasks_core.runtime._heartbeats import HeartbeatStarts
from tasks_core.runtime._lease import LeaseCell
from tasks_core.runtime._tally import Tally

if TYPE_CHECKING:
    from tasks_core.policy import Limits, Policy
    from tasks_core.runtime._notify import Changes
    from tasks_core.store import TaskStore

__all__ = ["UNRECOVERABLE", "Run", "RunEnv"]

log = logging.getLogger("tasks_core.worker")

UNRECOVERABLE: tuple[type[BaseException], ...] = (
    MemoryError,
    RecursionError,
    KeyboardInterrupt,
    SystemExit,
)
"""Errors that fail a task at once, never retried."""


def _frames(error: BaseException) -> str:
    """Where ``error`` was raised: its traceback's frames (files, lines and code — never
    the message, which only the policy's redactor may pass on)."""
    frames = "".join(traceback.format_tb(error.__traceback__)).rstrip()
    return f"Traceback (most recent call last):\n{frames}" if frames else "(no traceback)"


def _log_written(task_id: str, event: Event, transition: Transition) -> None:
    """Log what a worker event did: a completion at DEBUG (the worker's summary line
    counts it); a retry request says whether the task was scheduled again or failed with
    no retry left (WARNING)."""
    snapshot = transition.snapshot
    if isinstance(event, RetryRequested) and transition.outcome != "unchanged":
        if snapshot.status == TaskStatus.FAILED:
            log.warning("task %r: failed: %s (no retry left after %d attempt(s))", task_id,
                        event.error, snapshot.retry_count + 1)
        else:
            log.info("task %r: retry %d scheduled at %s (%s)", task_id, snapshot.retry_count,
                     snapshot.retry_at, transition.outcome)
        return
    log.debug("task %r: %s (%s)", task_id, event.kind, transition.outcome)


class _Parked(BaseException):
    """The run waited for input longer than the park time: give the slot back."""


@dataclass(frozen=True)
class RunEnv:
    """What a run needs from its worker and app."""

    store: TaskStore
    policy: Policy
    limits: Limits
    changes: Changes
    work: Changes
    worker_id: str
    lease_for: float
    input_park: float
    poll_interval: float
    progress_interval: float
    recover: Literal["retry", "fail"]
    stopping: Callable[[], bool]
    heartbeats: HeartbeatStarts
    """Starts each run's heartbeat once it has run for ``lease_for / 3``."""
    finish_early: Callable[[Run, Coroutine[Any, Any, None]], asyncio.Task[None]]
    """Run the rest of a slot whose run stopped waiting for its handler (the timeout's
    write, a cancel's release) in a task of its own; the slot ends with that task."""
    group: GroupCommit | None = None
    """The worker's group commit of terminal events (stores with ``batch_transitions``)."""
    free_slot: Callable[[Run], None] | None = None
    """Give the run's worker slot back before its terminal event is written (group mode)."""
    unwritten: Callable[[str], None] | None = None
    """Told the task id of a run whose outcome (its last event or release) the store
    failed to take: the task runs again once its lease expires."""
    tally: Tally | None = None
    """Counts the events the worker's runs wrote, for its summary line."""


@dataclass(frozen=True)
class _Outcome:
    value: Any = None
    error: BaseException | None = None


class Run:
    """One claim being executed; see the module docstring."""

    def __init__(
        self, env: RunEnv, claim: Claim, task: TaskDef | None, *, recheck: bool = False
    ) -> None:
        self.env = env
        self.recheck = recheck
        """Read the task with the lease before the handler starts (a claim held long
        enough for a cancel from another process to land unseen)."""
        self.task = task
        self.snapshot: Snapshot = claim.snapshot
        self.task_id = claim.snapshot.id
        self.run_id = claim.snapshot.run_id
        self.generation = claim.lease.generation
        self.cell = LeaseCell(env.store, claim.lease, env.group)
        self.token = CancelToken()
        self.loop = asyncio.get_running_loop()
        self.runner: asyncio.Task[None] | None = None
        """The run's own task (set by the worker): the lifecycle, the async handler in it."""
        self.started = False
        self.parked = False
        self.dead = False
        self.settling = False
        """The handler is done and its outcome is on the way to the store."""
        self._in_handler = False
        self._stopped = False  # stopped waiting for the handler (see the module docstring)
        self._early: asyncio.Task[None] | None = None  # the rest of a stopped run's slot
        self._cancel_asked = False  # this run cancelled its async handler
        self._timer: asyncio.TimerHandle | None = None  # the timeout's
        self._ran_for = 0.0  # the handler's own time when it ended
        self._helpers: list[asyncio.Task[None]] = []
        self._writer: asyncio.Task[None] | None = None
        self._helpers_stopped = False
        self._stop_signal: asyncio.Event | None = None  # made when a helper task starts
        self._progress: tuple[float, str | None] | None = None
        self._progress_ready: asyncio.Event | None = None
        self._started_at = 0.0
        self._waited = 0.0
        self._wait_since: float | None = None

    # -- identity ------------------------------------------------------------------------

    def event_id(self, step: str) -> str:
        """The stable id of this run's write ``step``."""
        return f"{self.run_id}:{self.generation}:{step}"

    def stop(self, reason: CancelReason) -> None:
        """Set the token (first cause wins) and wake the supervisor; any thread."""
        if self.token.cancel(reason):
            log.info("task %r: run asked to stop (%s)", self.task_id, reason.value)
        self._kick()

    def _kick(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._review()
        else:
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._review)
        self.env.changes.notify()

    def observe(self, snapshot: Snapshot) -> None:
        """Learn from a snapshot read with the lease: a cancel or a new run."""
        if snapshot.run_id != self.run_id:
            self.stop(CancelReason.SUPERSEDED)
            return
        self.snapshot = snapshot
        if snapshot.status == TaskStatus.CANCELLED:
            self.stop(CancelReason.USER)

    def lost(self) -> None:
        """The lease is gone: this run is superseded; its writes are fenced."""
        self.stop(CancelReason.SUPERSEDED)

    # -- the lifecycle -------------------------------------------------------------------

    async def execute(self) -> None:
        """Run the claim to the end of its slot (see the module docstring)."""
        try:
            await self._execute()
        except asyncio.CancelledError:
            self.abandon()
            raise

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
            await self._release("cancelled while held")
            return False
        return self.token.reason is None

    def abandon(self) -> None:
        """The worker died (or was cancelled): stop everything, write nothing (the worker
        cancels the run's tasks)."""
        self.dead = True
        self._disarm()
        self.env.heartbeats.discard(self)
        for helper in self._helpers:
            helper.cancel()

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
        self._started_at = self.loop.time()
        self._in_handler = True
        self._arm()
        try:
            if task.is_async:
                outcome = await _call_async(task.fn, ctx, args, kwargs)
            else:
                future: asyncio.Future[_Outcome] = self.loop.create_future()
                thread = threading.Thread(
                    target=_thread_main,
                    args=(self.loop, future, contextvars.Context(), task.fn, ctx, args,
                          kwargs),
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

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

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
        cancel waits for the loop), and this run's task waits for its late outcome."""
        self._stopped = True
        self._disarm()
        if self._in_handler and self.task is not None and self.task.is_async:
            self.loop.call_soon(self._cancel_handler)
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
            await self._release("cancelled by user")

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

    # -- outcomes ------------------------------------------------------------------------

    async def _finish(self, outcome: _Outcome, *, late: bool = False) -> None:
        error = outcome.error
        if not late:
            if self.parked or isinstance(error, _Parked):
                await self._release("parked while waiting for input")
                return
            if self.token.reason == CancelReason.SHUTDOWN and error is not None:
                await self._release("stopped for the shutdown")
                return
        event = self._outcome_event(outcome)
        if not late:
            self._settle()
        transition = await self._write(event, late=late)
        if (
            transition is not None
            and transition.outcome == "unchanged"
            and transition.snapshot.terminal
            and not late
        ):
            await self._release("the task had finished already")

    def _settle(self) -> None:
        """The handler is done: in group mode the worker slot is free at once (the lease
        is held, and the run stays the task's, until the group commit answers)."""
        self.settling = True
        if self.env.group is not None and self.env.free_slot is not None:
            self.env.free_slot(self)

    def _outcome_event(self, outcome: _Outcome) -> Event:
        error = outcome.error
        retry = outcome.value if isinstance(outcome.value, Retry) else error
        if isinstance(retry, Retry):
            return RetryRequested(event_id=self.event_id("retry"),
                                  error=retry.error[:256] or "Retry",
                                  message=self.env.policy.redact(retry))
        if error is None:
            try:
                check_json(outcome.value, what="result")
                most = self.env.limits.max_result_bytes
                if json_size(outcome.value) > most:
                    raise InvalidInput(f"the result is above max_result_bytes ({most} bytes "
                                       "of JSON); store large results elsewhere and return "
                                       "a reference")
                return Completed(event_id=self.event_id("completed"), result=outcome.value)
            except (ValueError, InvalidInput) as exc:
                return Failed(event_id=self.event_id("failed"), error="InvalidResult",
                              message=self.env.policy.redact(exc))
        name = type(error).__name__[:256]
        message = self.env.policy.redact(error)
        where = _frames(error)
        if isinstance(error, UNRECOVERABLE):
            log.error("task %r: unrecoverable %s: %s; failing without retry\n%s",
                      self.task_id, name, message, where)
            return Failed(event_id=self.event_id("failed"), error=name, message=message)
        log.info("task %r: handler raised %s: %s\n%s", self.task_id, name, message, where)
        return RetryRequested(event_id=self.event_id("retry"), error=name, message=message)

    async def _write(self, event: Event, *, late: bool = False) -> Any:
        """Send a worker event; ``None`` when the store refused it."""
        try:
            transition = await self.cell.write(event, self.snapshot.revision)
        except LeaseLost:
            verb = "late outcome" if late else event.kind
            log.warning("task %r: %s fenced off (this run no longer holds the lease)",
                        self.task_id, verb)
            self.lost()
            return None
        except TasksError:
            log_failure(log, "task %r: could not write %s", self.task_id, event.kind)
            if not late:
                self._unwritten()
            return None
        self.observe(transition.snapshot)
        self.env.changes.notify()
        _log_written(self.task_id, event, transition)
        if self.env.tally is not None and transition.outcome == "applied":
            self.env.tally.count(event.kind)
        return transition

    def _unwritten(self) -> None:
        if self.env.unwritten is not None:
            self.env.unwritten(self.task_id)

    async def _release(self, why: str) -> None:
        try:
            await self.cell.release()
        except LeaseLost:
            return
        except TasksError:
            log_failure(log, "task %r: could not release (%s)", self.task_id, why)
            self._unwritten()
            return
        log.info("task %r: released (%s)", self.task_id, why)
        if self.env.tally is not None:
            self.env.tally.count("released")
        self.env.changes.notify()
        self.env.work.notify()

    # -- heartbeat and progress ----------------------------------------------------------

    def _start_helpers(self) -> None:
        """Arm the heartbeat: its task starts at the first renew, and the progress
        writer's at the first progress report (a short run starts neither)."""
        self.env.heartbeats.add(self)

    def start_heartbeat(self) -> None:
        """The first renew is due: start the heartbeat's task (unless the helpers
        stopped)."""
        if not self._helpers_stopped:
            self._helpers.append(self.loop.create_task(self._heartbeat()))

    def _start_progress_writer(self) -> None:
        if self._progress_ready is None:
            self._progress_ready = asyncio.Event()
        self._progress_ready.set()
        if self._writer is None and not self._helpers_stopped:
            self._writer = self.loop.create_task(self._progress_writer())
            self._helpers.append(self._writer)

    async def _stop_helpers_gracefully(self, *, flush: bool) -> None:
        if not flush:
            self._progress = None
        self._helpers_stopped = True
        if self._stop_signal is not None:
            self._stop_signal.set()
        if self._progress_ready is not None:
            self._progress_ready.set()
        self.env.heartbeats.discard(self)
        if flush and self._progress is not None and self._writer is None:
            await self._write_progress()  # reported, but the writer had not started yet
        if self._helpers:
            await asyncio.gather(*self._helpers, return_exceptions=True)

    async def _pause(self, seconds: float) -> bool:
        """Sleep unless the helpers are told to stop; ``True`` when told to stop."""
        if self._helpers_stopped:
            return True
        if self._stop_signal is None:
            self._stop_signal = asyncio.Event()
        try:
            await asyncio.wait_for(self._stop_signal.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def _heartbeat(self) -> None:
        """Renew now (the first interval has passed), then every ``lease_for / 3``."""
        interval = self.env.lease_for / 3
        while True:
            try:
                snapshot = await self.cell.renew(self.env.lease_for)
            except LeaseLost:
                log.warning("task %r: lease lost on renew", self.task_id)
                self.lost()
                return
            except Exception:
                log_failure(log, "task %r: renew failed; trying again", self.task_id)
            else:
                self.observe(snapshot)
            if await self._pause(interval):
                return

    def progress(self, value: float, message: str | None) -> None:
        """Record the latest progress; the writer stores it, throttled. Any thread."""
        if self.dead or self._helpers_stopped:
            return
        self._progress = (value, message)
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._start_progress_writer)

    async def _progress_writer(self) -> None:
        ready = self._progress_ready
        assert ready is not None  # made before this writer started
        while True:
            await ready.wait()
            ready.clear()
            await self._write_progress()
            # told to stop during that write, or during the pause: what came meanwhile
            if self._helpers_stopped or await self._pause(self.env.progress_interval):
                await self._write_progress()
                return

    async def _write_progress(self) -> None:
        """Store the latest progress with the lease; none once the run was stopped for
        a cause other than a drain (a drained run is released with its progress)."""
        pending, self._progress = self._progress, None
        if pending is None or self.token.reason not in (None, CancelReason.SHUTDOWN):
            return
        try:
            snapshot = await self.cell.progress(*pending)
        except LeaseLost:
            self.lost()
            return
        except Exception:
            log_failure(log, "task %r: progress write failed", self.task_id)
            return
        self.observe(snapshot)
        self.env.changes.notify()

    # -- input requests ------------------------------------------------------------------

    async def request_input(self, key: str, request: Any) -> Any:
        """Ask under ``key`` and wait for the answer (see ``TaskContext.request_input``)."""
        if self.dead:
            raise RunCancelled(CancelReason.SUPERSEDED)
        check_key(key)
        answers = self.snapshot.accepted_input_responses
        if key in answers:
            return answers[key]
        reason = self.token.reason
        if reason == CancelReason.SHUTDOWN:
            raise self._park()
        if reason is not None:
            raise RunCancelled(reason)
        if json_size(request) > self.env.limits.max_input_bytes:
            raise InvalidInput(f"an input request must be at most "
                               f"{self.env.limits.max_input_bytes} bytes of JSON")
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        event = InputRequested(event_id=self.event_id(f"input:{digest}"), key=key, request=request)
        transition = await self._write(event)
        if transition is None:
            if self.token.reason is None:
                # The store failed (not the lease): give the slot back like a park; the
                # task runs again, from the start, without a retry counted against it.
                raise self._park()
            raise RunCancelled(self.token.reason)
        snapshot: Snapshot = transition.snapshot
        if key in snapshot.accepted_input_responses:
            return snapshot.accepted_input_responses[key]
        if snapshot.terminal:
            raise RunCancelled(self.token.reason or CancelReason.USER)
        if key not in snapshot.input_requests:
            raise InvalidInput(f"input key {key!r} was already asked in this task")
        log.info("task %r: waiting for input %r", self.task_id, key)
        return await self._await_answer(key)

    def _park(self) -> _Parked:
        self.parked = True
        return _Parked()

    async def _await_answer(self, key: str) -> Any:
        self._wait_since = self.loop.time()
        self._kick()
        deadline = self._wait_since + self.env.input_park
        try:
            while True:
                reason = self.token.reason
                if reason == CancelReason.SHUTDOWN:
                    raise self._park()
                if reason is not None:
                    raise RunCancelled(reason)
                remaining = deadline - self.loop.time()
                if remaining <= 0:
                    log.info("task %r: no answer to %r within %gs; parking the task",
                             self.task_id, key, self.env.input_park)
                    raise self._park()
                version = self.env.changes.version
                await self.env.changes.wait(version, min(remaining, self.env.poll_interval))
                try:
                    snapshot = await self.cell.snapshot()
                except LeaseLost:
                    self.lost()
                    raise RunCancelled(self.token.reason or CancelReason.SUPERSEDED) from None
                except StoreUnavailable:
                    # The store's failure, not the handler's: look again (the park time
                    # still bounds the wait).
                    log.warning("task %r: store unavailable while waiting for input; "
                                "looking again", self.task_id)
                    continue
                self.observe(snapshot)
                if key in snapshot.accepted_input_responses:
                    return snapshot.accepted_input_responses[key]
        finally:
            self._waited += self.loop.time() - self._wait_since
            self._wait_since = None
            self._kick()


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
