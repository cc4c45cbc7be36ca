"""The worker's summary line: per-task lines are DEBUG, so INFO says once per interval how
many runs ended and how, and how busy the worker is.

Every outcome a run of the worker wrote is counted by what it made of the task
(:func:`~tasks_core.events.ended_as`): a finished task by its status (``completed``,
``failed`` — a retry asked for with no attempt left included —, ``cancelled``), a retry
scheduled as ``retried``, a run that gave its claim back as ``cancelled`` (a user's cancel
stopped it), ``parked`` (it waits for input, holding no slot) or ``released`` (a drain,
a claim held too long); each interval, and once more when the
worker stops, one INFO line gives the counts since the last line and how long that was
(nothing when nothing ended: the next line then covers the quiet interval too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable

from tasks_core.events import Event, InputRequested, ended_as
from tasks_core.models import Snapshot

__all__ = ["SUMMARY_INTERVAL", "Tally"]

log = logging.getLogger("tasks_core.worker")

SUMMARY_INTERVAL = 60.0
"""Seconds between two summary lines of a worker."""


class Tally:
    """Counts what a worker's runs wrote and logs a summary line each interval.

    Args:
        worker_id: named in each line.
        busy: ``(running, held)`` now: handlers not finished (a run awaiting its group
            commit is not running), claims held ahead of a slot.
        interval: seconds between lines.
        clock: seconds on a monotonic clock.
    """

    def __init__(self, worker_id: str, busy: Callable[[], tuple[int, int]],
                 interval: float = SUMMARY_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.worker_id = worker_id
        self.busy = busy
        self.interval = interval
        self.clock = clock
        self.counts: Counter[str] = Counter()
        self._since = clock()

    def count(self, kind: str) -> None:
        """One more run ended as ``kind``."""
        self.counts[kind] += 1

    def written(self, event: Event, snapshot: Snapshot) -> None:
        """Count ``event``, applied, by what it made of the task (``snapshot``, after it:
        :func:`~tasks_core.events.ended_as`) — unless it ended no run: a question asked
        (the run waits, or parks: counted then)."""
        if isinstance(event, InputRequested):
            return
        self.count(ended_as(event, snapshot))

    def flush(self) -> None:
        """Log the counts since the last line, if anything ended, and start again."""
        if not self.counts:
            return
        now = self.clock()
        ended = ", ".join(f"{n} {kind}" for kind, n in sorted(self.counts.items()))
        running, held = self.busy()
        log.info("worker %s: %s in the last %.1fs; %d running, %d held", self.worker_id,
                 ended, now - self._since, running, held)
        self.counts.clear()
        self._since = now

    async def run(self, stop: asyncio.Event) -> None:
        """A line each interval until ``stop`` is set; none then: the worker flushes the
        last once its drain has ended, so one line covers the whole drain."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
            if not stop.is_set():
                self.flush()
