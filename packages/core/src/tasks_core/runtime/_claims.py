"""A worker's claim loop: what to claim, when, and how far ahead.

Claims of the open queues run in the background (at most :data:`CLAIMS_IN_FLIGHT` at
once), each asking only for room no claim in flight asked for; a limited queue is claimed
one call at a time. ``prefetch`` holds claims beyond the free slots only while runs are
short (``"auto"``); a claim held for ``lease_for / 3`` is released instead of started. A
cancel always wins before the start: one recorded through the same app drops a held claim
or one still on its way back. When every claim came back empty the loop waits for work:
the store's wakeups, else polling with backoff — never past the next available instant
the store knows of. docs/runtime.md, "What a worker does", explains each rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Coroutine
from typing import Any, Literal

from tasks_core.durations import MIN_INTERVAL_S
from tasks_core.errors import StoreError, StoreUnavailable
from tasks_core.models import Claim, Snapshot, TaskStatus
from tasks_core.reasons import CancelReason
from tasks_core.rules import MAX_BATCH
from tasks_core.runtime._outage import Outage
from tasks_core.runtime._slots import Slots
from tasks_core.store import TaskStore
from tasks_core.storekit import QueueLimits

__all__ = ["AUTO_AHEAD", "CLAIMS_IN_FLIGHT", "MAX_AHEAD", "Claims"]

log = logging.getLogger("tasks_core.worker")

AUTO_AHEAD = 16
"""Claims per slot ``prefetch="auto"`` holds ahead while runs are short: a held task waits
about this many short runs at most."""


MAX_AHEAD = 1000
"""The most claims a worker holds ahead (``prefetch``'s largest value)."""


CLAIMS_IN_FLIGHT = 2
"""Claims of the open queues a worker keeps in flight at once while it claims no more than
``concurrency`` ahead (see :meth:`Claims._claims_in_flight`)."""


class Claims(Slots):
    """The claim loop of a :class:`~tasks_core.Worker` (its base class)."""

    queues: tuple[str, ...]
    limits: dict[str, int]
    exclusive: frozenset[str]
    fleet: dict[str, QueueLimits]
    prefetch: int | Literal["auto"]
    lease_for: float
    min_poll: float
    batch_window: float
    _stop: asyncio.Event

    def _init_claims(self) -> None:
        self._wakeups = Outage(log, "waiting for work", "polling with backoff")
        """The store's wakeups: logged once when they fail and once when they work again."""
        self._claiming = Outage(log, f"worker {self.worker_id}: claiming", "backing off")
        """The worker's claims: logged once when they fail and once when they work again."""
        self._claimed_once = False
        self._refused: StoreError | None = None
        """A refusal of this worker's first claims that is not an outage (a read-only file,
        a privilege missing): the claim loop stops with it, so ``run()`` raises it."""
        self._work_seen = 0
        self._claim_at = max(1, (self.concurrency + 1) // 2)
        self._held: deque[tuple[float, Claim]] = deque()
        """Claims beyond the free slots (``prefetch``), each with the loop time at which
        its claim was asked, oldest first."""
        self._asking: dict[asyncio.Task[None], int] = {}
        """Claims of the open queues in flight, each with how many tasks it asked for."""
        self._answers: list[tuple[int, bool]] = []
        """What claims in flight got since the claim loop last looked: ``(tasks, failed)``."""
        self._claims_out = 0
        """Claims sent to the store whose answer has not been looked at yet."""
        self._cancelled_meanwhile: set[tuple[str, str]] = set()
        """``(task_id, run_id)`` cancelled through this app while claims were out: their
        claims, when they come back, are dropped unstarted."""

    # -- what to claim -------------------------------------------------------------------

    def _plan(self) -> list[tuple[list[str], int, tuple[str, ...]]]:
        """Claim calls for now: ``(queues, limit, limited)``, limited queues first, each on
        its own (never more than the free slots); the others last, up to :meth:`_ahead`
        beyond them; no call for more than a store takes at once (``rules.MAX_BATCH``)."""
        free = self._free()
        plan: list[tuple[list[str], int, tuple[str, ...]]] = []
        open_queues: list[str] = []
        for q in self.queues:
            limit = self.limits.get(q)
            if limit is None:
                open_queues.append(q)
            elif self._active[q] < limit and free > 0:
                plan.append(([q], min(free, limit - self._active[q], MAX_BATCH), (q,)))
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


    # -- the loop ------------------------------------------------------------------------

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
            if self._refused is not None:
                raise self._refused
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
            for queues, limit, guarded in [] if dry else self._plan():
                if self.stopping:  # a drain began during a claim of a limited queue
                    break
                if queues[0] in self.limits:
                    if not self._asking:  # see the module docstring
                        self._answers.append(await self._claim(
                            store, queues, min(limit, self._free()), guarded, limited=True))
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
                     guarded: tuple[str, ...], *, limited: bool) -> tuple[int, bool]:
        """Claim up to ``limit`` tasks of ``queues``: start each in a free slot or hold it
        (open queues only); ``(tasks claimed, whether the store failed)``."""
        if limit <= 0:
            return 0, False
        asked = asyncio.get_running_loop().time()
        starting = limit if limited else self._starting(limit)
        options: dict[str, Any] = {"start": starting} if starting < limit else {}
        if exclusive := tuple(q for q in guarded if q in self.exclusive):
            options["exclusive"] = exclusive
        if fleet := {q: self.fleet[q] for q in guarded if q in self.fleet}:
            options["limits"] = fleet
        self._claims_out += 1
        try:
            claims = await store.claim_next(self.worker_id, self.lease_for, queues=queues,
                                            limit=limit, **options)
        except Exception as exc:  # a store outage (or a store bug) must not kill the worker
            if (isinstance(exc, StoreError) and not isinstance(exc, StoreUnavailable)
                    and not self._claimed_once):  # ... but a store refusing it from the start
                self._refused = exc  # the worker stops with it: no "backing off" line
                self._wake.set()
            else:
                self._claiming.failed()
            return 0, True
        finally:
            self._claims_out -= 1
        self._claimed_once = True
        self._claiming.worked()
        if self._cancelled_meanwhile:
            claims = [claim for claim in claims if not self._was_cancelled(claim.snapshot)]
        if not self._claims_out:
            self._cancelled_meanwhile.clear()
        for claim in claims:
            if limited or (self._free() > 0 and not self._held):
                self._start(claim)
            else:
                self._held.append((asked, claim))
        if claims:  # the tasks read running (or claimed) now: wake this process's watches
            self.app.notices.changes.notify()
        return len(claims), False

    def _starting(self, limit: int) -> int:
        """How many of a claim of the open queues for ``limit`` tasks will start at once:
        the free slots no other claim in flight asked for, none while claims are held. The
        store holds the rest (``claim_next(start=...)``: they read ``claimed``); a claim
        that starts nothing ahead passes no ``start``."""
        if self._held:
            return 0
        others = sum(self._asking.values()) - limit  # (this claim is among them)
        return max(0, min(limit, self._free() - max(0, others)))

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
        """Wait for work: store wakeups (unless the store just failed) or the backoff, and
        never past the next available instant the store knows of (a delayed task, a
        retry); local work, freed slots and a shutdown wake it early. A failing wakeup
        falls back to the backoff, so an outage never turns into a busy loop. The waits are
        made after the store is asked: a cancel there leaves no coroutine un-awaited."""
        due = await _due_in(store, self.queues) if wakeups else None
        waits: list[Coroutine[Any, Any, object]] = [
            self._stop.wait(), self._wake.wait(),
            self.app.notices.work.wait(self._work_seen, self.poll_interval)]
        timeout = backoff
        if wakeups and store.capabilities.wakeups:
            waits.append(_wakeup_or_backoff(store, list(self.queues), self.poll_interval,
                                            backoff, self._wakeups))
            timeout = self.poll_interval
        if due is not None:
            timeout = min(timeout, due)
        await _first(*waits, timeout=timeout)
        self._work_seen = self.app.notices.work.version


    # -- cancels -------------------------------------------------------------------------

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


async def _due_in(store: TaskStore, queues: tuple[str, ...]) -> float | None:
    """Seconds on the store clock until the next available instant of ``queues``
    (``store.next_available``; at least :data:`~tasks_core.durations.MIN_INTERVAL_S`), or
    ``None``: nothing waits, or the store could not say (the wait is then the usual one)."""
    try:
        due = await store.next_available(list(queues))
        if due is None:
            return None
        now = await store.now()
    except Exception as exc:  # the claim loop reports outages; this only shortens a wait
        log.debug("next_available failed: %r", exc)
        return None
    return max(MIN_INTERVAL_S, (due - now).total_seconds())


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

