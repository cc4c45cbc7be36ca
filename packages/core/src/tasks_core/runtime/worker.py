"""The worker: claims tasks in batches and runs them with bounded concurrency.

A :class:`Worker` is three layers: :class:`~tasks_core.runtime._slots.Slots` (starting
runs, freeing slots), :class:`~tasks_core.runtime._claims.Claims` (the claim loop, claiming
ahead, cancels of held claims) and this module: options, the helpers a run shares (group
commit, heartbeat timer, cancel watch, reaper, summary line) and the drain. Shutdown stops
claiming first, releases claims that arrive afterwards unstarted, gives running tokens
``shutdown`` and waits up to ``drain_timeout``; runs that outlive it keep their lease (and
heartbeat) until they end or the process exits. docs/runtime.md says what a worker does.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import secrets
import socket
from collections.abc import Collection, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self

from tasks_core import telemetry
from tasks_core._inert import inert
from tasks_core.durations import (
    MAX_BATCH_WINDOW_S,
    MAX_WAIT_S,
    MIN_INTERVAL_S,
    Seconds,
    check_duration,
)
from tasks_core.errors import CapabilityNotSupported, InvalidInput
from tasks_core.reasons import CancelReason
from tasks_core.rules import MAX_BATCH, MAX_LEASE_S, check_limit, check_worker_id
from tasks_core.runtime._cancel_watch import CancelWatch, WatchedTasks
from tasks_core.runtime._claims import AUTO_AHEAD, CLAIMS_IN_FLIGHT, MAX_AHEAD, Claims
from tasks_core.runtime._group import GroupCommit
from tasks_core.runtime._heartbeats import HeartbeatStarts
from tasks_core.runtime._host import WorkerHost
from tasks_core.runtime._housekeeping import Reaper
from tasks_core.runtime._lease import write_outage
from tasks_core.runtime._run import RunEnv
from tasks_core.runtime._scheduler import Scheduler
from tasks_core.runtime._slots import SHORT_RUN
from tasks_core.runtime._tally import Tally
from tasks_core.store import TaskStore
from tasks_core.storekit import MAX_RUNNING

__all__ = ["AUTO_AHEAD", "CLAIMS_IN_FLIGHT", "MAX_AHEAD", "SHORT_RUN", "Worker",
           "check_worker_lease"]

log = logging.getLogger("tasks_core.worker")


def check_worker_lease(lease_for: object, what: str = "lease_for") -> float:
    """A worker's lease length in seconds — the one check of ``Worker(lease_for=…)`` and
    of ``tasks workers --lease``: at least ``MIN_INTERVAL_S`` (its heartbeats repeat
    within it), at most ``rules.MAX_LEASE_S`` (the stores' cap).

    Raises:
        InvalidInput: see :func:`~tasks_core.durations.check_duration`, naming ``what``.
    """
    return check_duration(lease_for, what, low=MIN_INTERVAL_S, high=MAX_LEASE_S)


class Worker(Claims):
    """Runs the tasks of an :class:`~tasks_core.App`.

    Args:
        app: the app (an ``App``, seen as a
            :class:`~tasks_core.runtime._host.WorkerHost`; its store is opened on
            :meth:`run` if needed).
        queues: queues to serve (default: every queue the app declares).
        concurrency: runs at once (default ``app.limits.concurrency``, 8), at most
            ``storekit.MAX_RUNNING`` (``rules.check_limit``).
        queue_concurrency: per-queue limits overriding the app's ``Queue.concurrency``
            (declared queues, counts in ``1..MAX_RUNNING``).
        worker_id: default ``"<host>:<pid>:<random>"``; else a non-empty string of at most
            256 characters (``rules.check_worker_id``).
        lease_for: lease length in seconds; heartbeats renew every ``lease_for / 3``.
        recover: ``"retry"`` runs a task again after its worker died (at least once);
            ``"fail"`` fails it with "Worker process terminated unexpectedly".
        input_park: seconds a run waits for input before giving its slot back.
        poll_interval: the longest wait between claims when idle (backoff cap).
        min_poll: the first idle wait (backoff start) for stores without wakeups.
        progress_interval: at most one progress write per run per this many seconds.
        reap_interval: seconds between reaper ticks; ``None``: no reaper in this worker.
        batch_window: the longest a claim waits for half the slots to be free, and (on a
            store with ``batch_transitions``) a terminal event for others to be committed
            with it, in seconds; neither waits once no handler of the worker is running.
        commit_batch: the most terminal events committed together.
        prefetch: claims held beyond the free slots, for queues without a concurrency
            limit: ``"auto"`` (default: up to ``AUTO_AHEAD * concurrency``, at most 1000,
            while runs are short),
            ``0`` (none: no task waits in this worker holding a lease) or ``N`` (up to
            ``N``); see docs/runtime.md.
        drain_timeout: seconds a drain waits for the runs to end (``async with`` and
            :meth:`shutdown` without an argument).
        periodic: run the scheduler of the app's schedules (``@app.periodic``) next to the
            claim loop (default); ``False``: this worker only runs tasks.

    Every duration is checked by :func:`~tasks_core.durations.check_duration`: a real
    number, finite; ``lease_for`` at most ``rules.MAX_LEASE_S`` (the stores' cap), the
    intervals (``lease_for``, ``input_park``, ``poll_interval``, ``min_poll``,
    ``progress_interval``, ``reap_interval``) at least ``durations.MIN_INTERVAL_S``,
    ``batch_window`` in ``[0, 1]``, ``drain_timeout`` at least ``0``.

    Raises:
        InvalidInput: a bad argument or an undeclared queue.
    """

    def __init__(
        self,
        app: WorkerHost,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        queue_concurrency: Mapping[str, int] | None = None,
        worker_id: str | None = None,
        lease_for: Seconds = 30.0,
        recover: Literal["retry", "fail"] = "retry",
        input_park: Seconds = 30.0,
        poll_interval: Seconds = 1.0,
        min_poll: Seconds = 0.05,
        progress_interval: Seconds = 0.5,
        reap_interval: Seconds | None = 60.0,
        batch_window: Seconds = 0.003,
        commit_batch: int = 64,
        prefetch: int | Literal["auto"] = "auto",
        drain_timeout: Seconds = 5.0,
        periodic: bool = True,
    ) -> None:
        self.app = app
        declared = app.queues
        given: object = queues
        if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, Iterable | None):
            raise InvalidInput("queues must be a non-empty list of queue names")
        names = list(dict.fromkeys(queues)) if queues is not None else list(declared)
        if not names:
            raise InvalidInput("queues must be a non-empty list of queue names")
        unknown = [q for q in names if q not in declared]
        if unknown:
            raise InvalidInput(f"undeclared queue(s): {', '.join(unknown)}")
        self.queues: tuple[str, ...] = tuple(names)
        self.concurrency = check_limit(
            concurrency if concurrency is not None else app.limits.concurrency,
            maximum=MAX_RUNNING, what="concurrency")
        if recover not in ("retry", "fail"):
            raise InvalidInput("recover must be 'retry' or 'fail'")
        # Every duration through the one check (tasks_core.durations); a lease within the
        # stores' cap, every repeated wait at least MIN_INTERVAL_S.
        lease_for = check_worker_lease(lease_for)
        input_park, poll_interval, min_poll, progress_interval = (
            check_duration(value, what, low=MIN_INTERVAL_S, high=MAX_WAIT_S)
            for value, what in ((input_park, "input_park"), (poll_interval, "poll_interval"),
                                (min_poll, "min_poll"),
                                (progress_interval, "progress_interval")))
        reap_interval = check_duration(reap_interval, "reap_interval", low=MIN_INTERVAL_S,
                                       high=MAX_WAIT_S, allow_none=True)
        batch_window = check_duration(batch_window, "batch_window", high=MAX_BATCH_WINDOW_S,
                                      allow_zero=True)
        self.drain_timeout = check_duration(drain_timeout, "drain_timeout", high=MAX_WAIT_S,
                                            allow_zero=True)
        commit_batch = check_limit(commit_batch, maximum=MAX_BATCH, what="commit_batch")
        if prefetch != "auto":
            prefetch = check_limit(prefetch, minimum=0, maximum=MAX_AHEAD,
                                   what="prefetch ('auto' or a count)")
        per_queue = _queue_concurrency(queue_concurrency, declared)
        if not isinstance(periodic, bool):
            raise InvalidInput("periodic must be True or False")
        self.periodic = periodic
        # Fleet-wide limits: an exclusive queue without a rate is claimed the old way
        # (exclusive=...); every other limited queue passes its QueueLimits.
        self.exclusive = frozenset(q for q in self.queues
                                   if declared[q].exclusive and declared[q].rate is None)
        self.fleet = {q: limits for q in self.queues if q not in self.exclusive
                      and (limits := declared[q].limits) is not None}
        self.limits: dict[str, int] = {}
        for q in self.queues:
            limit = per_queue.get(q, declared[q].concurrency)
            running = declared[q].max_running
            if q in self.exclusive or q in self.fleet:  # claimed on its own, never more
                limit = min(limit or self.concurrency, running or self.concurrency)
            if limit is not None:
                self.limits[q] = limit
        self.worker_id = _default_worker_id() if worker_id is None else check_worker_id(worker_id)
        self.lease_for = lease_for
        self.recover: Literal["retry", "fail"] = recover
        self.input_park = input_park
        self.poll_interval = poll_interval
        self.min_poll = min(min_poll, poll_interval)
        self.progress_interval = progress_interval
        self.reap_interval = reap_interval
        self.batch_window = batch_window
        self.commit_batch = commit_batch
        self.prefetch: int | Literal["auto"] = prefetch
        self._stopping = False
        self._stop = asyncio.Event()
        self._loop_done = asyncio.Event()
        self._shutdown_done = asyncio.Event()
        self._settled: bool | None = None
        self._main: asyncio.Task[None] | None = None
        self.reaper: Reaper | None = None
        self.tally: Tally | None = None
        """The worker's summary line (:mod:`tasks_core.runtime._tally`), made by :meth:`run`."""
        self.group: GroupCommit | None = None
        self._init_slots()
        self._init_claims()

    # -- public --------------------------------------------------------------------------

    @property
    def running(self) -> list[str]:
        """Ids of the tasks this worker is running now."""
        return sorted(self.runs)

    async def run(self) -> None:
        """Serve until :meth:`shutdown` finishes (or this coroutine is cancelled: then
        every run is abandoned without a write, like a killed process).

        Raises:
            CapabilityNotSupported: exclusive queues, or queues with fleet-wide limits, on
                a store without them.
            StoreError: the store refused the first claims (not an outage).
        """
        store = await self._store_that_serves()
        if store.capabilities.batch_transitions and callable(
            getattr(store, "transition_many", None)
        ):
            self.group = GroupCommit(store, self._handlers_busy, window=self.batch_window,
                                     max_items=self.commit_batch)
        heartbeats = HeartbeatStarts(self.lease_for / 3)
        held_renews = HeartbeatStarts(SHORT_RUN)
        self.tally = Tally(self.worker_id, lambda: (self._handlers_busy(), len(self._held)))
        self._env = RunEnv(
            store=store, policy=self.app.policy, limits=self.app.limits,
            changes=self.app.notices.changes, work=self.app.notices.work,
            worker_id=self.worker_id,
            lease_for=self.lease_for, input_park=self.input_park,
            poll_interval=self.poll_interval, progress_interval=self.progress_interval,
            recover=self.recover, stopping=lambda: self._stopping, heartbeats=heartbeats,
            held_renews=held_renews,
            finish_early=self._finish_early,
            group=self.group, writes=write_outage(), free_slot=self._settle_slot,
            unwritten=self._unwritten.append, tally=self.tally,
            limited=self.exclusive | {q for q, limits in self.fleet.items()
                                      if limits.max_running is not None},
        )
        self._work_seen = self.app.notices.work.version
        self.app.notices.changes.add_cancel_listener(self._on_cancel)
        reaper_task: asyncio.Task[None] | None = None
        if self.reap_interval is not None:
            self.reaper = Reaper(store, interval=self.reap_interval)
            reaper_task = asyncio.create_task(self.reaper.run(self._stop))
        summaries = asyncio.create_task(self.tally.run(self._stop), name="tasks:summary")
        scheduling: asyncio.Task[None] | None = None
        if self.periodic and self.app.schedules:
            scheduler = Scheduler(store, self.app.tasks, self.app.schedules,
                                  notify=self.app.notices.work.notify,
                                  longest_wait=self.poll_interval)
            scheduling = asyncio.create_task(  # a tick is nobody's child: no caller's span
                scheduler.run(self._stop), name="tasks:periodic", context=contextvars.Context())
        watching: asyncio.Task[None] | None = None
        if store.capabilities.cancel_wakeups:
            watch = CancelWatch(store, WatchedTasks(self.runs, self._held),
                                self._cancelled_elsewhere, self.poll_interval)
            watching = asyncio.create_task(watch.run(), name="tasks:cancel-watch")
        log.info("worker %s serving %s (concurrency %d, prefetch %s, store %s)",
                 self.worker_id, ", ".join(self.queues), self.concurrency, self.prefetch,
                 type(store).__name__)
        claiming = asyncio.create_task(self._claim_loop(store), name="tasks:claim-loop")
        claiming.add_done_callback(lambda _: self._loop_done.set())
        served = telemetry.serving((task.queue, task.name) for task in self.app.tasks.values()
                                   if task.queue in self.queues)
        try:
            finished = asyncio.ensure_future(self._shutdown_done.wait())
            try:
                await asyncio.wait({claiming, finished}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                finished.cancel()
            if claiming.done() and not self._stopping:
                claiming.result()  # the claim loop died: say why
                raise RuntimeError("the claim loop ended without a shutdown")
            await self._shutdown_done.wait()
        except BaseException:
            for task, run in list(self._run_tasks.items()):
                run.abandon()
                task.cancel()
            if self.group is not None:
                self.group.abandon()
            raise
        finally:
            if not claiming.done():  # a claim outlived the drain: give up on it
                claiming.cancel()
            self.app.notices.changes.remove_cancel_listener(self._on_cancel)
            if reaper_task is not None:
                reaper_task.cancel()
            if watching is not None:
                watching.cancel()
            if scheduling is not None:
                scheduling.cancel()
            summaries.cancel()
            served()
            self.tally.flush()
            log.info("worker %s stopped", self.worker_id)

    async def shutdown(self, drain_timeout: Seconds | None = None) -> bool:
        """Drain (see the module docstring) and return whether everything settled.

        Safe to call more than once and from any task of the worker's loop.

        Args:
            drain_timeout: seconds to wait for the runs to end (default: the worker's
                ``drain_timeout``).

        Raises:
            InvalidInput: a bad ``drain_timeout`` (nothing stopped).
        """
        drain_timeout = self.drain_timeout if drain_timeout is None else check_duration(
            drain_timeout, "drain_timeout", high=MAX_WAIT_S, allow_zero=True)
        if self._settled is not None:
            return self._settled
        if self._stopping:
            await self._shutdown_done.wait()
            return bool(self._settled)
        self._stopping = True
        self._stop.set()
        self._wake.set()  # the claim loop waits on its wakeup alone
        before = len(self._unwritten)
        log.info("worker %s: shutting down (drain %gs)", self.worker_id, drain_timeout)
        deadline = asyncio.get_running_loop().time() + drain_timeout
        started = self._env is not None
        if started:
            await _wait_until(self._loop_done.wait(), deadline)
        for run in list(self.runs.values()):
            if run.started:
                run.stop(CancelReason.SHUTDOWN)
        pending = [*self._run_tasks, *self._releasing]
        if pending:
            await _wait_until(asyncio.wait(pending), deadline)
        outliving = sorted(self.runs)
        unwritten = sorted(set(self._unwritten[before:]))
        settled = (self._loop_done.is_set() or not started) and not outliving and not unwritten
        if outliving:
            log.warning("worker %s: %d run(s) outlived the drain and keep their lease: %s",
                        self.worker_id, len(outliving), ", ".join(outliving))
        if unwritten:
            log.warning("worker %s: the outcome of %d task(s) could not be written during the "
                        "drain (the store failed); they run again once their leases expire: "
                        "%s", self.worker_id, len(unwritten), ", ".join(unwritten))
        log.info("worker %s: drain %s", self.worker_id, "settled" if settled else "unsettled")
        self._settled = settled
        self._shutdown_done.set()
        return settled

    async def _store_that_serves(self) -> TaskStore:
        """The app's store, opened, once it can serve this worker's queues.

        Raises:
            CapabilityNotSupported: as :meth:`run`.
        """
        store = await self.app.open()
        if self.exclusive and not store.capabilities.exclusive_queues:
            raise CapabilityNotSupported(
                f"queue(s) {', '.join(sorted(self.exclusive))} are exclusive, but this store "
                "has no exclusive_queues capability"
            )
        if self.fleet and not store.capabilities.queue_limits:
            raise CapabilityNotSupported(
                f"queue(s) {', '.join(sorted(self.fleet))} have fleet-wide limits "
                "(max_running, rate), but this store has no queue_limits capability"
            )
        return store

    async def __aenter__(self) -> Self:
        """Start :meth:`run` in the background, once the store can serve this worker (a
        refusal is raised here, before the block runs).

        Raises:
            CapabilityNotSupported: as :meth:`run`.
        """
        await self._store_that_serves()
        self._main = asyncio.create_task(self.run())
        self._main.add_done_callback(_report_early_end)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Shut down (a drain of ``drain_timeout`` seconds) and wait for :meth:`run` to
        return."""
        main = self._main
        if main is None:
            return
        if main.done():
            main.result()
            return
        await self.shutdown()
        await main


def _report_early_end(main: asyncio.Task[None]) -> None:
    """Log at ERROR a background :meth:`Worker.run` that raised: the block of ``async with
    app.worker()`` goes on without a worker, and only its end would raise it."""
    if not main.cancelled() and (error := main.exception()) is not None:
        log.error("worker stopped: %s: %s (raised again when its async with block ends)",
                  type(error).__name__, inert(str(error)))


def _default_worker_id() -> str:
    return f"{socket.gethostname()[:200]}:{os.getpid()}:{secrets.token_hex(3)}"


def _queue_concurrency(given: object, declared: Collection[str]) -> dict[str, int]:
    """``queue_concurrency`` checked: ``None``, or a mapping of declared queues (a typo is
    refused; a queue this worker does not serve is left unused) to counts in
    ``1..MAX_RUNNING``.

    Raises:
        InvalidInput: not a mapping, an undeclared queue, a count out of range.
    """
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise InvalidInput("queue_concurrency must be a dict of queue names to counts")
    unknown = [repr(q) for q in given if q not in declared]
    if unknown:
        raise InvalidInput(f"queue_concurrency names undeclared queue(s): {', '.join(unknown)}")
    return {q: check_limit(count, maximum=MAX_RUNNING, what=f"queue_concurrency[{q!r}]")
            for q, count in given.items()}


async def _wait_until(awaitable: Any, deadline: float) -> None:
    remaining = deadline - asyncio.get_running_loop().time()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(asyncio.ensure_future(awaitable)), max(remaining, 0))

