"""The worker: claims tasks in batches and runs them with bounded concurrency.

Loop: claim with ``claim_next(limit=free slots)``; while fewer than half the slots are
free and handlers still run, wait at most ``batch_window`` for more to free up, so one
claim serves several slots — start a :class:`Run` per claim, and when nothing was claimed
wait for work: the store's wakeups where it offers them (``capabilities.wakeups``), else
polling with exponential backoff; submits, answers and releases made through the same
``App`` wake it at once either way.

Claims in flight: the open queues' claim runs in the background, and while it is in flight
the loop asks for the next one as soon as slots free up (at most :data:`CLAIMS_IN_FLIGHT`
at once), each asking only for room no claim in flight asked for — so the round trip of a
claim overlaps the next and the bounds below count tasks asked for as if held. A worker
serving a queue with a concurrency limit claims one call at a time: a limited queue's
claim starts its tasks at once, so no other claim may answer meanwhile and take its slots.
So does a worker that claims more than ``concurrency`` ahead: what it holds covers a
claim's round trip, and one claim of everything there is room for costs fewer round trips
than two. The worker waits for work only once every claim in flight came back empty.

Claiming ahead (``prefetch``): the queues without a concurrency limit are claimed beyond
the free slots, so the next claim is in flight while handlers run instead of after they
finish. ``prefetch="auto"`` (the default) claims up to :data:`AUTO_AHEAD` times
``concurrency`` ahead only while runs are short — the last ``concurrency`` runs each held
their slot at most :data:`SHORT_RUN` seconds and none in a slot now has held it longer —
so a held task waits a few short runs at most, and a worker of long handlers claims no
more than it can start; ``prefetch=0`` never claims ahead, ``prefetch=N`` always up to
``N``. A held claim starts in the first free slot, oldest first; one held for ``lease_for
/ 3`` (a heartbeat interval, counted from before its claim was asked) is released instead
— it never starts with less than two thirds of its lease left, and a long handler never
keeps it from other workers for longer. A release gives the task back but not the
delivery its claim counted (``Work.max_deliveries``), so after one the worker claims no
further ahead until a run ends.

A cancel always wins before the start: one recorded through the same ``App`` drops a held
claim, or a claim still on its way back, unstarted; one from another process is pushed
where the store has ``cancel_wakeups`` (:mod:`tasks_core.runtime._cancel_watch`), and a claim held
for ``poll_interval`` or longer is read again before it starts.

Concurrency: ``concurrency`` handlers at once in this worker, and per queue at most
``Queue.concurrency`` (``1``: sequential, oldest first, in this worker). A queue declared
``exclusive=True`` runs one task at a time across every worker (store capability
``exclusive_queues``; refused at start otherwise).

Group commit: on a store with ``batch_transitions`` the terminal events of the worker's
runs are written together (:class:`~tasks_core.runtime._group.GroupCommit`: one transaction for
several completions, each still fenced by its own revision and lease), and a run gives its
slot back as soon as its handler is done, so the next claim overlaps the commit. A crash
before the commit only means those tasks run again.

Shutdown (:meth:`Worker.shutdown`): stop claiming first; claims that arrive afterwards
are released unstarted (nothing lost, nothing cancelled); running tokens get
``shutdown``; wait up to ``drain_timeout``; runs that outlive the wait keep their lease
(and heartbeat) until they end or the process exits, so nobody declares them dead early.
Returns whether everything settled.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import secrets
import socket
from collections import Counter, deque
from collections.abc import Coroutine, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from tasks_core.durations import (
    MAX_BATCH_WINDOW_S,
    MAX_WAIT_S,
    MIN_INTERVAL_S,
    check_duration,
)
from tasks_core.errors import CapabilityNotSupported, InvalidInput, LeaseLost, TasksError
from tasks_core.models import Claim, Snapshot, TaskStatus
from tasks_core.reasons import CancelReason
from tasks_core.rules import MAX_BATCH, MAX_LEASE_S
from tasks_core.runtime._cancel_watch import CancelWatch, WatchedTasks
from tasks_core.runtime._failures import log_failure
from tasks_core.runtime._group import GroupCommit
from tasks_core.runtime._heartbeats import HeartbeatStarts
from tasks_core.runtime._housekeeping import Reaper
from tasks_core.runtime._outage import Outage
from tasks_core.runtime._run import Run, RunEnv
from tasks_core.runtime._tally import Tally

if TYPE_CHECKING:
    from tasks_core.runtime.app import App

__all__ = ["Worker"]

log = logging.getLogger("tasks_core.worker")

SHORT_RUN = 0.02
"""Seconds a run may hold its slot and still count as short for ``prefetch="auto"``."""

AUTO_AHEAD = 16
"""Claims per slot ``prefetch="auto"`` holds ahead while runs are short: a held task waits
about this many short runs at most."""

MAX_AHEAD = 1000
"""The most claims a worker holds ahead (``prefetch``'s largest value)."""

CLAIMS_IN_FLIGHT = 2
"""Claims of the open queues a worker keeps in flight at once while it claims no more than
``concurrency`` ahead (see the module docstring)."""


class Worker:
    """Runs the tasks of an :class:`~tasks_core.runtime.app.App`.

    Args:
        app: the app (its store is opened on :meth:`run` if needed).
        queues: queues to serve (default: every queue the app declares).
        concurrency: runs at once (default ``app.limits.concurrency``, 8).
        queue_concurrency: per-queue limits overriding the app's ``Queue.concurrency``.
        worker_id: default ``"<host>:<pid>:<random>"``.
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
            ``N``); see the module docstring.
        drain_timeout: seconds a drain waits for the runs to end (``async with`` and
            :meth:`shutdown` without an argument).

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
        app: App,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        queue_concurrency: Mapping[str, int] | None = None,
        worker_id: str | None = None,
        lease_for: float = 30.0,
        recover: Literal["retry", "fail"] = "retry",
        input_park: float = 30.0,
        poll_interval: float = 1.0,
        min_poll: float = 0.05,
        progress_interval: float = 0.5,
        reap_interval: float | None = 60.0,
        batch_window: float = 0.003,
        commit_batch: int = 64,
        prefetch: int | Literal["auto"] = "auto",
        drain_timeout: float = 5.0,
    ) -> None:
        self.app = app
        declared = app.queues
        names = list(dict.fromkeys(queues)) if queues is not None else list(declared)
        if isinstance(queues, str) or not names:
            raise InvalidInput("queues must be a non-empty list of queue names")
        unknown = [q for q in names if q not in declared]
        if unknown:
            raise InvalidInput(f"undeclared queue(s): {', '.join(unknown)}")
        self.queues: tuple[str, ...] = tuple(names)
        self.concurrency = concurrency if concurrency is not None else app.limits.concurrency
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) \
                or self.concurrency < 1:
            raise InvalidInput("concurrency must be a positive integer")
        if recover not in ("retry", "fail"):
            raise InvalidInput("recover must be 'retry' or 'fail'")
        # Every duration through the one check (tasks_core.durations); a lease within the
        # stores' cap, every repeated wait at least MIN_INTERVAL_S.
        lease_for = check_duration(lease_for, "lease_for", low=MIN_INTERVAL_S,
                                   high=MAX_LEASE_S)
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
        self._wakeups = Outage(log, "waiting for work", "polling with backoff")
        """The store's wakeups: logged once when they fail and once when they work again."""
        if isinstance(commit_batch, bool) or not isinstance(commit_batch, int) \
                or not 1 <= commit_batch <= 1000:
            raise InvalidInput("commit_batch must be an integer in 1..1000")
        if prefetch != "auto" and (isinstance(prefetch, bool) or not isinstance(prefetch, int)
                                   or not 0 <= prefetch <= MAX_AHEAD):
            raise InvalidInput(f"prefetch must be 'auto' or an integer in 0..{MAX_AHEAD}")
        self.exclusive = frozenset(q for q in self.queues if declared[q].exclusive)
        self.limits: dict[str, int] = {}
        for q in self.queues:
            limit = (queue_concurrency or {}).get(q, declared[q].concurrency)
            if q in self.exclusive:
                limit = 1
            if limit is not None:
                self.limits[q] = limit
        self.worker_id = worker_id or _default_worker_id()
        self.lease_for = lease_for
        self.recover: Literal["retry", "fail"] = recover
        self.input_park = input_park
        self.poll_interval = poll_interval
        self.min_poll = min(min_poll, poll_interval)
        self.progress_interval = progress_interval
        self.reap_interval = reap_interval
        self.runs: dict[str, Run] = {}
        self._run_tasks: dict[asyncio.Task[None], Run] = {}
        self._releasing: set[asyncio.Future[Any]] = set()
        self._late: set[asyncio.Future[Any]] = set()
        self._unwritten: list[str] = []
        """Tasks whose outcome (last event or release) the store failed to take."""
        self._active: Counter[str] = Counter()
        self._stopping = False
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        """Set when the claim loop may have something to do: a slot freed, a claim in flight
        answered, a held claim dropped, a shutdown began."""
        self._loop_done = asyncio.Event()
        self._shutdown_done = asyncio.Event()
        self._settled: bool | None = None
        self._env: RunEnv | None = None
        self._main: asyncio.Task[None] | None = None
        self.claimed = 0
        self.reaper: Reaper | None = None
        self.tally: Tally | None = None
        """The worker's summary line (:mod:`tasks_core.runtime._tally`), made by :meth:`run`."""
        self._work_seen = 0
        self.batch_window = batch_window
        self.commit_batch = commit_batch
        self._claim_at = max(1, (self.concurrency + 1) // 2)
        self.group: GroupCommit | None = None
        self._slots: dict[Run, float] = {}
        """Runs holding a slot, each with the loop time it started, oldest first."""
        self.prefetch: int | Literal["auto"] = prefetch
        self._short_run = SHORT_RUN
        self._short_runs = 0
        """Runs in a row (at most ``concurrency``) that held their slot for a short run."""
        self._held: deque[tuple[float, Claim]] = deque()
        """Claims beyond the free slots (``prefetch``), each with the loop time at which
        its claim was asked, oldest first."""
        self._hold_failed = False
        """A held claim was released unstarted: no claiming ahead until a run ends."""
        self._asking: dict[asyncio.Task[None], int] = {}
        """Claims of the open queues in flight, each with how many tasks it asked for."""
        self._answers: list[tuple[int, bool]] = []
        """What claims in flight got since the claim loop last looked: ``(tasks, failed)``."""
        self._claims_out = 0
        """Claims sent to the store whose answer has not been looked at yet."""
        self._cancelled_meanwhile: set[tuple[str, str]] = set()
        """``(task_id, run_id)`` cancelled through this app while claims were out: their
        claims, when they come back, are dropped unstarted."""

    # -- public --------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """Whether a shutdown has begun (no more claims)."""
        return self._stopping

    @property
    def running(self) -> list[str]:
        """Ids of the tasks this worker is running now."""
        return sorted(self.runs)

    async def run(self) -> None:
        """Serve until :meth:`shutdown` finishes (or this coroutine is cancelled: then
        every run is abandoned without a write, like a killed process).

        Raises:
            CapabilityNotSupported: exclusive queues on a store without them.
        """
        store = await self.app._opened()
        if self.exclusive and not store.capabilities.exclusive_queues:
            raise CapabilityNotSupported(
                f"queue(s) {', '.join(sorted(self.exclusive))} are exclusive, but this store "
                "has no exclusive_queues capability"
            )
        if store.capabilities.batch_transitions and callable(
            getattr(store, "transition_many", None)
        ):
            self.group = GroupCommit(store, self._handlers_busy, window=self.batch_window,
                                     max_items=self.commit_batch)
        heartbeats = HeartbeatStarts(self.lease_for / 3)
        self.tally = Tally(self.worker_id, lambda: (len(self.runs), len(self._held)))
        self._env = RunEnv(
            store=store, policy=self.app.policy, limits=self.app.limits,
            changes=self.app._changes, work=self.app._work, worker_id=self.worker_id,
            lease_for=self.lease_for, input_park=self.input_park,
            poll_interval=self.poll_interval, progress_interval=self.progress_interval,
            recover=self.recover, stopping=lambda: self._stopping, heartbeats=heartbeats,
            finish_early=self._finish_early,
            group=self.group, free_slot=self._free_slot, unwritten=self._unwritten.append,
            tally=self.tally,
        )
        self._work_seen = self.app._work.version
        self.app._changes.add_cancel_listener(self._on_cancel)
        reaper_task: asyncio.Task[None] | None = None
        if self.reap_interval is not None:
            self.reaper = Reaper(store, interval=self.reap_interval)
            reaper_task = asyncio.create_task(self.reaper.run(self._stop))
        summaries = asyncio.create_task(self.tally.run(self._stop), name="tasks:summary")
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
            self.app._changes.remove_cancel_listener(self._on_cancel)
            if reaper_task is not None:
                reaper_task.cancel()
            if watching is not None:
                watching.cancel()
            summaries.cancel()
            self.tally.flush()
            log.info("worker %s stopped", self.worker_id)

    async def shutdown(self, drain_timeout: float | None = None) -> bool:
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

    async def __aenter__(self) -> Worker:
        """Start :meth:`run` in the background."""
        await self.app._opened()
        self._main = asyncio.create_task(self.run())
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

    # -- claiming ------------------------------------------------------------------------

    def _free(self) -> int:
        return self.concurrency - sum(self._active.values())

    def _plan(self) -> list[tuple[list[str], int, tuple[str, ...]]]:
        """Claim calls for now: ``(queues, limit, exclusive)``, limited queues first (never
        more than the free slots); the others last, up to :meth:`_ahead` beyond them; no
        call for more than a store takes at once (``rules.MAX_BATCH``)."""
        free = self._free()
        plan: list[tuple[list[str], int, tuple[str, ...]]] = []
        open_queues: list[str] = []
        for q in self.queues:
            limit = self.limits.get(q)
            if limit is None:
                open_queues.append(q)
            elif self._active[q] < limit and free > 0:
                exclusive = (q,) if q in self.exclusive else ()
                plan.append(([q], min(free, limit - self._active[q], MAX_BATCH), exclusive))
        room = self._room()
        if open_queues and (room >= self._claim_at or (room > 0 and free > 0)):
            plan.append((open_queues, min(room, MAX_BATCH), ()))
        return plan

    def _claims_in_flight(self) -> int:
        """How many claims of the open queues may be in flight at once: one while a queue
        has a concurrency limit (see the module docstring) or while the worker claims
        more than ``concurrency`` ahead — the claims it holds cover one claim's round
        trip, and one bigger claim costs fewer round trips than two — else
        :data:`CLAIMS_IN_FLIGHT`."""
        if self.limits or self._ahead() > self.concurrency:
            return 1
        return CLAIMS_IN_FLIGHT

    def _room(self) -> int:
        """How many tasks of the open queues a claim may take now: the free slots, plus
        :meth:`_ahead`, less the claims held and the tasks claims in flight asked for."""
        return self._free() + self._ahead() - len(self._held) - sum(self._asking.values())

    def _ahead(self) -> int:
        """How many claims may be held beyond the free slots now: none while claiming
        ahead is paused (a held claim was released); ``prefetch``; or, for ``"auto"``,
        :data:`AUTO_AHEAD` times ``concurrency`` (at most :data:`MAX_AHEAD`) while the last
        ``concurrency`` runs were short and no run in a slot has held it longer than a
        short run, else none."""
        if self._hold_failed:
            return 0
        if self.prefetch != "auto":
            return self.prefetch
        if self._short_runs < self.concurrency:
            return 0
        oldest = next(iter(self._slots.values()), None)
        if oldest is not None and asyncio.get_running_loop().time() - oldest > self._short_run:
            return 0
        return min(AUTO_AHEAD * self.concurrency, MAX_AHEAD)

    async def _claim_loop(self, store: Any) -> None:
        try:
            await self._claim_until_stopped(store)
        finally:
            try:
                if self._asking and self._stopping:  # a drain: released as they arrive
                    await asyncio.wait(list(self._asking))
            finally:  # a cancel (a killed worker): their tasks are left to their leases
                for asking in list(self._asking):
                    asking.cancel()
                while self._held:  # a shutdown (or a cancel): give held claims back
                    self._release(self._held.popleft()[1], "the worker is shutting down")

    async def _claim_until_stopped(self, store: Any) -> None:
        loop = asyncio.get_running_loop()
        backoff = self.min_poll
        dry = failed = False  # every claim answered since tasks last came was empty
        while not self._stopping:
            self._wake.clear()  # what woke the loop is looked at below
            answers, self._answers = self._answers, []
            if any(got for got, _ in answers):
                dry = failed = False
                backoff = self.min_poll
            elif answers:
                dry, failed = True, failed or any(bad for _, bad in answers)
            if dry and not self._asking:
                await self._idle(store, backoff, wakeups=not failed)
                backoff = min(backoff * 2, self.poll_interval)
                dry = failed = False
                continue
            self._start_held(loop.time())
            if 0 < self._free() < self._claim_at and self._handlers_busy() and not self._held:
                await self._more_slots()
            for queues, limit, exclusive in [] if dry else self._plan():
                if self.stopping:  # a drain began during a claim of a limited queue
                    break
                if queues[0] in self.limits:
                    if not self._asking:  # see the module docstring
                        self._answers.append(await self._claim(
                            store, queues, min(limit, self._free()), exclusive, limited=True))
                elif len(self._asking) < self._claims_in_flight():
                    self._ask(store, queues, min(limit, self._room()))
            if not self._answers:  # an answer, a freed slot, a held claim's turn, a shutdown
                await _wait_for(self._wake, self._hold_left(loop.time()))

    def _ask(self, store: Any, queues: list[str], limit: int) -> None:
        """Claim up to ``limit`` tasks of the open ``queues`` in the background; the claim
        loop hears of the answer through :attr:`_answers` (and a wakeup)."""
        if limit <= 0:
            return

        async def ask() -> None:
            answer = (0, True)
            try:
                answer = await self._claim(store, queues, limit, (), limited=False)
            finally:
                self._asking.pop(asking, None)
                self._answers.append(answer)
                self._wake.set()

        asking = asyncio.create_task(ask(), name="tasks:claim")
        self._asking[asking] = limit

    async def _claim(self, store: Any, queues: list[str], limit: int,
                     exclusive: tuple[str, ...], *, limited: bool) -> tuple[int, bool]:
        """Claim up to ``limit`` tasks of ``queues``: start each in a free slot or hold it
        (open queues only); ``(tasks claimed, whether the store failed)``."""
        if limit <= 0:
            return 0, False
        asked = asyncio.get_running_loop().time()
        self._claims_out += 1
        try:
            claims = await store.claim_next(self.worker_id, self.lease_for, queues=queues,
                                            limit=limit, exclusive=exclusive)
        except Exception:  # a store outage (or a store bug) must not kill the worker
            log_failure(log, "worker %s: claim failed; backing off", self.worker_id)
            return 0, True
        finally:
            self._claims_out -= 1
        if self._cancelled_meanwhile:
            claims = [claim for claim in claims if not self._was_cancelled(claim.snapshot)]
        if not self._claims_out:
            self._cancelled_meanwhile.clear()
        for claim in claims:
            if limited or (self._free() > 0 and not self._held):
                self._start(claim)
            else:
                self._held.append((asked, claim))
        return len(claims), False

    def _start_held(self, now: float) -> None:
        """Start held claims in the free slots, oldest first; release those held for a
        heartbeat interval (``lease_for / 3``) instead."""
        held = self._held
        while held and (self._free() > 0 or now - held[0][0] >= self.lease_for / 3):
            asked, claim = held.popleft()
            if now - asked >= self.lease_for / 3:
                self._hold_failed = True
                self._release(claim, f"held for {self.lease_for / 3:g}s without a free slot")
            else:
                self._start(claim, held_for=now - asked)

    def _hold_left(self, now: float) -> float | None:
        """Seconds until the oldest held claim is due for release (``None``: none held)."""
        if not self._held:
            return None
        return max(0.0, self._held[0][0] + self.lease_for / 3 - now)

    async def _more_slots(self) -> None:
        """Wait at most ``batch_window`` for half the slots to be free (or for no handler
        to run), so that one claim serves several slots."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.batch_window
        while self._free() < self._claim_at and self._handlers_busy() and not self._stopping:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._wake.clear()
            await _wait_for(self._wake, remaining)

    async def _idle(self, store: Any, backoff: float, *, wakeups: bool) -> None:
        """Wait for work: store wakeups (unless the store just failed) or the backoff; local
        work, freed slots and a shutdown wake it early. A failing wakeup falls back to the
        backoff, so an outage never turns into a busy loop."""
        waits: list[Coroutine[Any, Any, object]] = [
            self._stop.wait(), self._wake.wait(),
            self.app._work.wait(self._work_seen, self.poll_interval)]
        timeout = backoff
        if wakeups and store.capabilities.wakeups:
            waits.append(_wakeup_or_backoff(store, list(self.queues), self.poll_interval,
                                            backoff, self._wakeups))
            timeout = self.poll_interval
        await _first(*waits, timeout=timeout)
        self._work_seen = self.app._work.version

    def _start(self, claim: Claim, *, held_for: float = 0.0) -> None:
        """Start a run of ``claim`` in a free slot. A claim held for ``poll_interval`` or
        longer is read again first: a cancel from another process may have landed
        meanwhile, before a pushed cancel could reach the worker (its watch sees a new
        held claim at its next wait, within ``poll_interval``)."""
        assert self._env is not None
        self.claimed += 1
        snapshot = claim.snapshot
        if self._stopping:
            self._release(claim, "the worker is shutting down")
            return
        run = Run(self._env, claim, self.app.tasks.get(snapshot.work.name),
                  recheck=held_for >= self.poll_interval)
        self.runs[snapshot.id] = run
        self._slots[run] = asyncio.get_running_loop().time()
        self._active[snapshot.queue] += 1
        # A fresh context: the handler runs in this task (never in the worker's context).
        task = asyncio.get_running_loop().create_task(
            self._in_slot(run, run.execute()), name=f"tasks:run:{snapshot.id}",
            context=contextvars.Context(),
        )
        run.runner = task
        self._run_tasks[task] = run

    async def _in_slot(self, run: Run, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` for ``run``'s slot; the slot ends with it."""
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("task %r: the run failed unexpectedly", run.task_id)
        finally:
            self._free_slot(run)
            if self.runs.get(run.task_id) is run:
                del self.runs[run.task_id]
            current = asyncio.current_task()
            if current is not None:
                self._run_tasks.pop(current, None)
            self._wake.set()

    def _finish_early(self, run: Run, rest: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """``run`` stopped waiting for its handler: the rest of its slot runs in a task of
        its own, and the run's task, still waiting for the handler, is kept apart (a
        drain does not wait for it)."""
        late = run.runner
        if late is not None and self._run_tasks.pop(late, None) is not None:
            self._late.add(late)
            late.add_done_callback(self._late.discard)
        task = asyncio.get_running_loop().create_task(
            self._in_slot(run, rest), name=f"tasks:run-stopped:{run.task_id}",
            context=contextvars.Context(),
        )
        self._run_tasks[task] = run
        return task

    def _free_slot(self, run: Run) -> None:
        """Give ``run``'s slot back (once): when its run ends, or in group mode as soon as
        its handler is done."""
        started = self._slots.pop(run, None)
        if started is None:
            return
        self._active[run.snapshot.queue] -= 1
        self._hold_failed = False
        short = asyncio.get_running_loop().time() - started <= self._short_run
        self._short_runs = min(self._short_runs + 1, self.concurrency) if short else 0
        self._wake.set()

    def _handlers_busy(self) -> int:
        """Runs of this worker whose handler has not finished (the group commit waits for
        them, briefly)."""
        return sum(1 for run in self.runs.values() if not run.settling)

    def _release(self, claim: Claim, why: str) -> None:
        """Give ``claim`` back unstarted, in the background (a shutdown waits for it)."""
        release = asyncio.ensure_future(self._release_unstarted(claim, why))
        self._releasing.add(release)
        release.add_done_callback(self._releasing.discard)

    async def _release_unstarted(self, claim: Claim, why: str) -> None:
        try:
            assert self._env is not None
            await self._env.store.release(claim.lease)
        except LeaseLost:
            return
        except TasksError:
            log_failure(log, "task %r: could not release an unstarted claim", claim.snapshot.id)
            self._unwritten.append(claim.snapshot.id)
            return
        log.info("task %r: released unstarted (%s)", claim.snapshot.id, why)
        self.app._work.notify()
        self.app._changes.notify()

    def _on_cancel(self, task_id: str, run_id: str) -> None:
        """A cancel recorded through this app: stop that run, or never start it when its
        claim is held or still on its way back from the store (the task is finished: there
        is nothing to give back)."""
        run = self.runs.get(task_id)
        if run is not None and run.run_id == run_id:
            run.stop(CancelReason.USER)
            return
        if not self._drop_held(task_id, run_id) and self._claims_out:
            self._cancelled_meanwhile.add((task_id, run_id))

    def _cancelled_elsewhere(self, snapshot: Snapshot) -> None:
        """The store reported a cancel (:mod:`tasks_core.runtime._cancel_watch`): ``snapshot`` is
        the task as read since. A run of it learns from it as from a heartbeat; a held
        claim of a cancelled run is dropped."""
        run = self.runs.get(snapshot.id)
        if run is not None:
            run.observe(snapshot)
        elif snapshot.status == TaskStatus.CANCELLED:
            self._drop_held(snapshot.id, snapshot.run_id)

    def _drop_held(self, task_id: str, run_id: str) -> bool:
        """Forget the held claim of ``run_id`` of ``task_id``, unstarted; whether one was."""
        for entry in self._held:
            snapshot = entry[1].snapshot
            if snapshot.id == task_id and snapshot.run_id == run_id:
                self._held.remove(entry)
                self._wake.set()  # room for another claim ahead
                log.info("task %r: cancelled while its claim was held; not started", task_id)
                return True
        return False

    def _was_cancelled(self, snapshot: Snapshot) -> bool:
        """Whether the claim of ``snapshot`` came back after a cancel through this app."""
        if (snapshot.id, snapshot.run_id) not in self._cancelled_meanwhile:
            return False
        log.info("task %r: cancelled while its claim was on the way; not started", snapshot.id)
        return True


def _default_worker_id() -> str:
    return f"{socket.gethostname()[:200]}:{os.getpid()}:{secrets.token_hex(3)}"


async def _wait_until(awaitable: Any, deadline: float) -> None:
    remaining = deadline - asyncio.get_running_loop().time()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(asyncio.ensure_future(awaitable)), max(remaining, 0))


async def _wakeup_or_backoff(
    store: Any, queues: list[str], timeout: float, backoff: float, outage: Outage
) -> None:
    """``store.wait_for_work``; when it fails, wait out ``backoff`` instead. ``outage``
    logs a failure once per outage and its end once, never once per poll."""
    try:
        await store.wait_for_work(queues, timeout)
    except Exception:
        outage.failed()
        await asyncio.sleep(backoff)  # the backoff itself, not a stand-in for an event
    else:
        outage.worked()


async def _wait_for(event: asyncio.Event, timeout: float | None) -> None:
    """Wait until ``event`` is set or ``timeout`` seconds pass (``None``: no limit) — on
    the claim loop's hot path, so no task is made for it."""
    if timeout is None:
        await event.wait()
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


async def _first(*awaitables: Any, timeout: float | None = None) -> None:
    """Wait until the first of ``awaitables`` finishes (or ``timeout``); cancel the rest."""
    tasks: list[asyncio.Future[Any]] = [asyncio.ensure_future(a) for a in awaitables]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                log.warning("a wait for work failed: %r", task.exception())
            task.cancel()
