"""The state of one run and how it is told to stop: the base of :class:`~._run.Run`.

A run's token holds the first stop cause (:class:`~tasks_core.reasons.CancelReason`);
:meth:`RunBase.stop` sets it from any thread and wakes the run's supervision on its loop.
A snapshot read with the lease (:meth:`RunBase.observe`) tells the run of a cancel or of a
new run of its task. Event ids are ``"<run_id>:<generation>:<step>"``: the same for every
retry of one write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tasks_core.cancel import CancelToken
from tasks_core.definitions import TaskDef
from tasks_core.models import Claim, Snapshot, TaskStatus
from tasks_core.reasons import CancelReason
from tasks_core.runtime._group import GroupCommit
from tasks_core.runtime._heartbeats import HeartbeatStarts
from tasks_core.runtime._lease import LeaseCell
from tasks_core.runtime._outage import Outage
from tasks_core.runtime._tally import Tally

if TYPE_CHECKING:
    from tasks_core._otel import RunSpan
    from tasks_core.policy import Limits, Policy
    from tasks_core.runtime._notify import Changes
    from tasks_core.store import TaskStore

__all__ = ["RunBase", "RunEnv"]

log = logging.getLogger("tasks_core.worker")


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
    finish_early: Callable[[RunBase, Coroutine[Any, Any, None]], asyncio.Task[None]]
    """Run the rest of a slot whose run stopped waiting for its handler (the timeout's
    write, a cancel's release) in a task of its own; the slot ends with that task."""
    group: GroupCommit | None = None
    """The worker's group commit of terminal events (stores with ``batch_transitions``)."""
    writes: Outage | None = None
    """The worker's writes of its runs' events that the store refused as unavailable,
    logged once per outage (``None``: each run's own)."""
    free_slot: Callable[[RunBase], None] | None = None
    """Give the run's worker slot back before its terminal event is written (group mode)."""
    unwritten: Callable[[str], None] | None = None
    """Told the task id of a run whose outcome (its last event or release) the store
    failed to take: the task runs again once its lease expires."""
    tally: Tally | None = None
    """Counts the events the worker's runs wrote, for its summary line."""
    held_renews: HeartbeatStarts | None = None
    """Starts the heartbeat of a run of a claim held ahead of its slot (it reads
    ``claimed``) a short run after its start, so that it reads ``running``; a shorter run
    never pays that renew. ``None``: at the usual first heartbeat."""
    limited: frozenset[str] = frozenset()
    """The queues with a fleet-wide ``max_running`` (exclusive ones included): a run
    stopped by its timeout or a cancel keeps its lease and slot until its handler returns."""


@dataclass(frozen=True)
class _Outcome:
    value: Any = None
    error: BaseException | None = None


class RunBase:
    """One claim being executed: its state, identity and stop cause (see
    :class:`~tasks_core.runtime._run.Run`)."""

    _span: RunSpan | None = None
    """The run's telemetry span, made when the handler starts (telemetry enabled only)."""

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
        self.held = claim.snapshot.claim is not None and claim.snapshot.claim.held
        """Claimed ahead of its slot: the task reads ``claimed`` until a renew."""
        self.cell = LeaseCell(env.store, claim.lease, env.lease_for, env.group, env.writes)
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
        """When the input waits under way began (``None``: none is)."""
        self._waits = 0
        """Input waits under way (a handler may ask several keys at once)."""
        self._asked: dict[str, Any] = {}
        """The request of each key this run asked (two asks of one key at once share it)."""


    # -- identity ------------------------------------------------------------------------

    def event_id(self, step: str) -> str:
        """The stable id of this run's write ``step``."""
        return f"{self.run_id}:{self.generation}:{step}"

    def stop(self, reason: CancelReason) -> None:
        """Set the token (first cause wins) and wake the supervisor; any thread."""
        if self.token.cancel(reason):  # a drain's stops are summed up by the worker
            log.log(logging.DEBUG if reason is CancelReason.SHUTDOWN else logging.INFO,
                    "task %r: run asked to stop (%s)", self.task_id, reason.value)
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

    def abandon(self) -> None:
        """The worker died (or was cancelled): stop everything, write nothing (the worker
        cancels the run's tasks)."""
        self.dead = True
        self._disarm()
        self.env.heartbeats.discard(self)
        if self.env.held_renews is not None:
            self.env.held_renews.discard(self)
        for helper in self._helpers:
            helper.cancel()

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def start_heartbeat(self) -> None:
        """The first renew is due (:class:`~tasks_core.runtime._run_helpers.RunHelpers`
        starts the heartbeat)."""
        raise NotImplementedError

    async def give_back(self) -> None:
        """The run failed unexpectedly: stop its helpers, give the task back
        (:class:`~tasks_core.runtime._run_helpers.RunHelpers` does)."""
        raise NotImplementedError

    def _review(self) -> None:
        """Supervise the handler after a stop cause or an input wait's start or end
        (:class:`~tasks_core.runtime._run.Run` does)."""
        raise NotImplementedError
