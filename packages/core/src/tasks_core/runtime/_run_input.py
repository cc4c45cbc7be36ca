"""A run's input requests: ask under a key, wait for the answer, or park.

A key is asked at most once per task; a stored answer is returned at once (a re-run of a
parked task); two asks of one key at once share its question, or the second is refused
when it asks another request. The wait does not count against the timeout. After
``input_park`` seconds without an answer, or on a drain, the run is parked: it gives its
slot back and the task runs again from the start once answered. A store failure while
asking parks it too (no retry counted); one while waiting is looked past (the park time
still bounds the wait).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from tasks_core._json import check_payload
from tasks_core.authority import check_key
from tasks_core.cancel import RunCancelled
from tasks_core.errors import InvalidInput, LeaseLost, StoreUnavailable
from tasks_core.events import InputRequested
from tasks_core.models import Snapshot
from tasks_core.reasons import CancelReason
from tasks_core.runtime._run_base import _Parked
from tasks_core.runtime._run_helpers import RunHelpers

__all__ = ["RunInput"]

log = logging.getLogger("tasks_core.worker")


class RunInput(RunHelpers):
    """Input requests of a run (a base of :class:`~tasks_core.runtime._run.Run`)."""

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
        check_payload(request, "request", self.env.limits.max_input_bytes)
        if self._asked.setdefault(key, request) != request:  # another ask of it at once
            raise InvalidInput(f"input key {key!r} is asked already in this run, with "
                               "another request")
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
        log.debug("task %r: waiting for input %r", self.task_id, key)  # the summary counts it
        return await self._await_answer(key)

    def _park(self) -> _Parked:
        self.parked = True
        return _Parked()

    async def _await_answer(self, key: str) -> Any:
        """Wait for the answer to ``key`` for at most ``input_park`` (then park). Waits may
        overlap (a handler asking two keys at once): time counts as waiting — not against
        the timeout — while any of them waits."""
        if not self._waits:
            self._wait_since = self.loop.time()
        self._waits += 1
        self._kick()
        deadline = self.loop.time() + self.env.input_park
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
            self._waits -= 1
            if not self._waits and self._wait_since is not None:
                self._waited += self.loop.time() - self._wait_since
                self._wait_since = None
            self._kick()

