"""A run's writes: the outcome of its handler as an event, written with the lease.

``completed`` for a JSON result within ``max_result_bytes``; ``retry_requested`` for an
exception or ``Retry``; ``failed`` at once for :data:`UNRECOVERABLE` errors or a result
that is not JSON (a WARNING line, as every failure). An exception is stored under an
error type name (:func:`_error_name`). A parked run, or a run stopped with an error for a
``shutdown``, is released instead. In group mode (``batch_transitions``) the worker slot is
given back as soon as the handler is done. A refused write (``LeaseLost``) means the run
lost its task; a failed one is reported to the worker (it runs again once its lease ends).
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any

from tasks_core import telemetry
from tasks_core._inert import inert
from tasks_core._json import check_json, json_size
from tasks_core.definitions import Retry
from tasks_core.errors import InvalidInput, LeaseLost, TasksError
from tasks_core.events import Completed, Event, Failed, RetryRequested, Transition
from tasks_core.models import TaskStatus
from tasks_core.reasons import CancelReason
from tasks_core.runtime._failures import log_failure
from tasks_core.runtime._run_base import RunBase, _Outcome, _Parked

__all__ = ["UNRECOVERABLE", "RunWrites"]

log = logging.getLogger("tasks_core.worker")

LAPSED = (": it ran out before this worker renewed it — an event loop blocked past the lease "
          "(an async handler calling blocking code: make it a plain def handler, which runs "
          "in a thread) or a store out of reach that long; the task runs again")
"""What a fenced-off write adds when the run's lease ran out by this process's clock."""

UNRECOVERABLE: tuple[type[BaseException], ...] = (
    MemoryError,
    RecursionError,
    KeyboardInterrupt,
    SystemExit,
)
"""Errors that fail a task at once, never retried — alone or within an exception group
(:func:`_unrecoverable`)."""


def _unrecoverable(error: BaseException) -> bool:
    """Whether ``error`` is one of :data:`UNRECOVERABLE` or an exception group holding one
    (``asyncio.TaskGroup`` raises a child's ``MemoryError`` in an ``ExceptionGroup``)."""
    if isinstance(error, BaseExceptionGroup):
        return error.subgroup(UNRECOVERABLE) is not None
    return isinstance(error, UNRECOVERABLE)


def _error_name(error: BaseException) -> str:
    """The stored type name of ``error`` (``ErrorInfo.type``, the ``error`` label): its
    class's name when that is an error type name by ``Retry(error=…)``'s one rule, else
    the nearest base class's that is (a class named with a newline, a control character
    or 200 letters would forge a log line or a metric label)."""
    for cls in type(error).__mro__:
        try:
            return Retry(error=cls.__name__).error
        except InvalidInput:
            continue
    return "BaseException"  # unreachable: BaseException's own name passes


def _frames(error: BaseException) -> str:
    """Where ``error`` was raised: its traceback's frames (files, lines and code — never
    the message, which only the policy's redactor may pass on), each of its texts inert:
    a file or function name cannot forge a log line."""
    frames = [f'  File "{inert(frame.filename)}", line {frame.lineno}, in {inert(frame.name)}'
              + (f"\n    {inert(frame.line.strip())}" if frame.line else "")
              for frame in traceback.extract_tb(error.__traceback__)]
    if not frames:
        return "(no traceback)"
    return "Traceback (most recent call last):\n" + "\n".join(frames)


def _log_written(task_id: str, event: Event, transition: Transition) -> None:
    """Log what a worker event did: a completion at DEBUG (the worker's summary line
    counts it); a retry request says whether the task was scheduled again or failed with
    no retry left (WARNING)."""
    snapshot = transition.snapshot
    if isinstance(event, RetryRequested) and transition.outcome != "unchanged":
        if snapshot.status == TaskStatus.FAILED:
            log.warning("task %r: failed: %s: %s (no retry left after %d attempt(s))",
                        task_id, inert(event.error), inert(event.message),
                        snapshot.retry_count + 1)
        else:
            log.info("task %r: retry %d scheduled at %s (%s)", task_id, snapshot.retry_count,
                     snapshot.retry_at, transition.outcome)
        return
    log.debug("task %r: %s (%s)", task_id, event.kind, transition.outcome)


class RunWrites(RunBase):
    """The writes of a run (a base of :class:`~tasks_core.runtime._run.Run`)."""

    async def _finish(self, outcome: _Outcome, *, late: bool = False) -> None:
        error = outcome.error
        if not late:
            if self.parked or isinstance(error, _Parked):
                await self._release("parked while waiting for input", "parked")
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
                message = self.env.policy.redact(exc)
                log.warning("task %r: failed: the handler's result cannot be stored "
                            "(InvalidResult): %s", self.task_id, inert(message))
                return Failed(event_id=self.event_id("failed"), error="InvalidResult",
                              message=message)
        name = _error_name(error)
        message = self.env.policy.redact(error)
        where = _frames(error)
        if _unrecoverable(error):
            log.error("task %r: unrecoverable %s: %s; failing without retry\n%s",
                      self.task_id, inert(name), inert(message), where)
            return Failed(event_id=self.event_id("failed"), error=name, message=message)
        log.info("task %r: handler raised %s: %s\n%s", self.task_id, inert(name), inert(message),
                 where)
        return RetryRequested(event_id=self.event_id("retry"), error=name, message=message)

    def lapse_note(self) -> str:
        """:data:`LAPSED` once the run's lease ran out by this process's clock, else ``""``."""
        return LAPSED if time.monotonic() > self.cell.live_until else ""

    async def _write(self, event: Event, *, late: bool = False) -> Any:
        """Send a worker event; ``None`` when the store refused it."""
        try:
            transition = await self.cell.write(event, self.snapshot.revision)
        except LeaseLost:
            # A late outcome after a cancel or a timeout is fenced off by design (the
            # stopped run already wrote or released): DEBUG. Anything else means the run
            # lost its lease unexpectedly (a stall, a takeover): WARNING.
            expected = late and self.token.reason in (CancelReason.USER, CancelReason.TIMEOUT)
            log.log(logging.DEBUG if expected else logging.WARNING,
                    "task %r: %s fenced off (this run no longer holds the lease%s)",
                    self.task_id, "late outcome" if late else event.kind,
                    "" if expected else self.lapse_note())
            self.lost()
            return None
        except TasksError:
            log_failure(log, "task %r: could not write %s", self.task_id, event.kind)
            if not late:
                self._unwritten()
            return None
        self.observe(transition.snapshot)
        self.env.changes.notify()
        if self.snapshot.queue in self.env.limited:
            # The queue's room counts this run until its write: a claim asked for when
            # the handler's slot freed was refused meanwhile, so claim again now.
            self.env.work.notify()
        _log_written(self.task_id, event, transition)
        if transition.outcome == "applied":
            if self.env.tally is not None:
                self.env.tally.written(event, transition.snapshot)
            if self._span is not None:  # counted by the telemetry that counted its start
                self._span.written(event, transition)
            elif not self.started and telemetry.active is not None:  # no start to match
                telemetry.active.written(event, transition)
        return transition

    def _unwritten(self) -> None:
        if self.env.unwritten is not None:
            self.env.unwritten(self.task_id)

    async def _release(self, why: str, counted: str = "released") -> None:
        """Give the task back (``why`` for the DEBUG line), counted by the tally as
        ``counted``: ``released``, ``cancelled`` (a user's cancel stopped the run) or
        ``parked``."""
        try:
            await self.cell.release()
        except LeaseLost:
            return
        except TasksError:
            log_failure(log, "task %r: could not release (%s)", self.task_id, why)
            self._unwritten()
            return
        log.debug("task %r: released (%s)", self.task_id, why)  # counted by the tally
        if self.env.tally is not None:
            self.env.tally.count(counted)
        self.env.changes.notify()
        self.env.work.notify()

