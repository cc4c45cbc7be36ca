"""The scheduler: the loop in every worker that creates the ticks of the app's schedules.

Rules: ticks are read on the store's clock (``store.now()``), never this process's; a
tick's task is created with ``store.create`` under its derived id, so ``TaskExists`` means
another scheduler made it, and any number of schedulers create each tick once. A pass
probes the ids of the ``catch_up`` latest ticks, newest first, stops at the first that
exists, and creates the newer ones oldest first (so a tick that exists has every missed
tick before it created). Between passes it waits, on the local clock, the store-clock time
to the next tick, at most ``longest_wait`` (a worker's ``poll_interval``, never above
``MAX_SLEEP_S``): a store clock that moves apart from the local one — a ``ManualClock`` in
tests, a server clock stepped — is read again that often. It wakes at once on stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from datetime import datetime

from tasks_core import telemetry
from tasks_core.authority import DEFAULT_TENANT
from tasks_core.definitions import TaskDef
from tasks_core.errors import (
    CapacityExceeded,
    StoreCorrupt,
    StoreUnavailable,
    TaskExists,
    TaskNotFound,
)
from tasks_core.models import NewTask, Work
from tasks_core.periodic import Schedule
from tasks_core.store import TaskStore

__all__ = ["MAX_SLEEP_S", "RETRY_S", "Scheduler"]

log = logging.getLogger("tasks_core.periodic")  # a stable name: logging configs refer to it

MAX_SLEEP_S = 60.0
"""The longest wait between passes: the store clock is read again at least this often."""

RETRY_S = 1.0
"""The wait after a failed pass before the next one (doubled for each further failure in a
row, at most ``MAX_SLEEP_S``)."""


class Scheduler:
    """Creates the ticks of ``schedules`` in ``store``.

    Args:
        store: the app's open store.
        tasks: the app's registered tasks by name (each schedule's task is one of them).
        schedules: the app's schedules by name.
        notify: called after a pass created a task (wakes this process's claim loops).
        longest_wait: the longest wait between passes, in seconds (at most
            ``MAX_SLEEP_S``; checked by the caller).
    """

    def __init__(self, store: TaskStore, tasks: Mapping[str, TaskDef],
                 schedules: Mapping[str, Schedule], *, notify: Callable[[], None],
                 longest_wait: float = MAX_SLEEP_S) -> None:
        self.store = store
        self.longest_wait = min(longest_wait, MAX_SLEEP_S)
        self.tasks = tasks
        self.schedules = dict(schedules)
        self.notify = notify
        self._handled: dict[str, datetime] = {}
        """Per schedule, the latest tick known to exist: no probe until a newer one."""
        self._refused: dict[str, datetime] = {}
        """Per schedule, the last tick the store refused (its warning is given once)."""

    async def run(self, stop: asyncio.Event) -> None:
        """Pass, wait for the next tick, pass again… until ``stop`` is set. A failed pass
        is logged and tried again after ``RETRY_S`` seconds, twice that after a second
        failure in a row, and so on up to ``MAX_SLEEP_S``."""
        loop = asyncio.get_running_loop()
        log.info("periodic: scheduling %s", ", ".join(
            f"{s.name} ({s.describe()})" for s in self.schedules.values()))
        failures = 0
        while not stop.is_set():
            started = loop.time()
            try:
                wait = await self.run_once()
            except Exception as exc:
                failures += 1
                wait = min(RETRY_S * 2 ** min(failures - 1, 16), MAX_SLEEP_S)
                if isinstance(exc, StoreUnavailable):
                    log.warning("periodic: a pass failed (%s); trying again in %gs", exc, wait)
                else:
                    log.exception("periodic: a pass failed; trying again in %gs", wait)
            else:
                failures = 0
                wait -= loop.time() - started
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), min(max(wait, 0.001), self.longest_wait))

    async def run_once(self) -> float:
        """One pass at the store's ``now``: create every missed tick of every schedule.

        Returns:
            Seconds from that ``now`` to the next tick of any schedule (store clock), at
            most ``MAX_SLEEP_S``.

        Raises:
            StoreUnavailable: the store failed (ticks created before it stay created).
        """
        now = await self.store.now()
        log.debug("periodic: pass at %s", now.isoformat())
        created = 0
        for schedule in self.schedules.values():
            created += await self.catch_up(schedule, now)
        if created:
            self.notify()
        upcoming = [t for s in self.schedules.values() if (t := s.following(now)) is not None]
        if not upcoming:
            return MAX_SLEEP_S
        return min(MAX_SLEEP_S, (min(upcoming) - now).total_seconds())

    async def catch_up(self, schedule: Schedule, now: datetime) -> int:
        """Create the missed ticks of ``schedule`` at ``now`` (module docstring); how many
        this call created.

        Raises:
            StoreUnavailable: the store failed.
        """
        ticks = schedule.recent(now, schedule.catch_up)
        if not ticks or self._handled.get(schedule.name) == ticks[0]:
            return 0
        missed: list[datetime] = []
        for tick in ticks:
            if await self._exists(schedule.task_id(tick)):
                break
            missed.append(tick)
        created = 0
        complete = True
        for tick in reversed(missed):
            outcome = await self._create(schedule, tick)
            created += outcome is True
            complete = complete and outcome is not None
        if complete:
            self._handled[schedule.name] = ticks[0]
        return created

    async def _exists(self, task_id: str) -> bool:
        try:
            await self.store.get(task_id, tenant=None)
        except TaskNotFound:
            return False
        except StoreCorrupt:
            log.warning("periodic: tick %s is unreadable (StoreCorrupt); not recreated",
                        task_id)
        return True

    async def _create(self, schedule: Schedule, tick: datetime) -> bool | None:
        """Create ``tick``'s task: ``True`` created, ``False`` another scheduler did,
        ``None`` refused (``CapacityExceeded``, logged; tried again at the next pass).

        Raises:
            StoreUnavailable: the store failed.
        """
        definition = self.tasks[schedule.task]
        task_id = schedule.task_id(tick)
        new = NewTask(
            id=task_id,
            tenant=DEFAULT_TENANT,
            owner=None,
            queue=schedule.queue,
            work=Work(name=definition.name, input=schedule.input, idempotency_key=task_id,
                      retry_policy=definition.retry, timeout_s=definition.timeout,
                      max_deliveries=definition.max_deliveries),
            retention_s=schedule.retention_for(tick, definition.retention),
            priority=definition.priority,
        )
        span = None if telemetry.active is None else telemetry.active.submit(new)
        try:
            await self.store.create(new if span is None else span.new)
        except TaskExists:
            if span is not None:
                span.end(None)
            log.debug("periodic %s: tick %s was created by another scheduler",
                      schedule.name, task_id)
            return False
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            if not isinstance(exc, CapacityExceeded):
                raise
            first = self._refused.get(schedule.name) != tick  # said once per tick
            self._refused[schedule.name] = tick
            log.log(logging.WARNING if first else logging.DEBUG,
                    "periodic %s: tick %s refused by the store (%s); the next pass "
                    "tries again while it is among the catch_up latest ticks",
                    schedule.name, task_id, exc)
            return None
        if span is not None:
            span.end("created")
        log.debug("periodic %s: created %s", schedule.name, task_id)
        return True
