"""Housekeeping: the periodic reaper of expired tasks.

``reap`` is idempotent and cheap, so every worker may run a reaper; each tick deletes
expired tasks in batches (at most ``max_batches``) and logs what it did, even when it did
nothing. A tick cut short by that cap is followed by the next within :data:`CATCH_UP_S`,
so the reaper keeps up with any rate of finishing tasks. A failing tick is logged and costs
that tick only: the next one runs on schedule.
"""

from __future__ import annotations

import asyncio
import logging

from tasks_core.runtime._failures import log_failure
from tasks_core.store import TaskStore

__all__ = ["CATCH_UP_S", "Reaper"]

log = logging.getLogger("tasks_core.housekeeping")

CATCH_UP_S = 1.0
"""Seconds at most between a tick cut short by its cap and the next one."""


class Reaper:
    """Deletes expired tasks every ``interval`` seconds.

    Args:
        store: the store to sweep.
        interval: seconds between ticks.
        batch: tasks per ``reap`` call.
        max_batches: ``reap`` calls per tick at most (the rest waits for the next tick).
    """

    def __init__(
        self, store: TaskStore, *, interval: float = 60.0, batch: int = 1000, max_batches: int = 10
    ) -> None:
        self.store = store
        self.interval = interval
        self.batch = batch
        self.max_batches = max_batches
        self.ticks = 0
        self.failures = 0

    async def sweep(self) -> list[str]:
        """One tick: delete expired tasks and log how many.

        Raises:
            StoreUnavailable: the store failed (nothing is lost; the next tick retries).
        """
        reaped: list[str] = []
        for _ in range(self.max_batches):
            ids = await self.store.reap(self.batch)
            reaped.extend(ids)
            if len(ids) < self.batch:
                break
        log.info("reaper: removed %d expired task(s)", len(reaped))
        return reaped

    async def tick(self) -> list[str] | None:
        """:meth:`sweep`, logging a failure instead of raising it; ``None`` on failure."""
        self.ticks += 1
        try:
            return await self.sweep()
        except Exception:
            self.failures += 1
            log_failure(log, "reaper: tick failed; the next runs in %gs", self.interval)
            return None

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until ``stop`` is set (the first tick runs at once; the next after
        ``interval``, or within :data:`CATCH_UP_S` when the last was cut short)."""
        while not stop.is_set():
            reaped = await self.tick()
            behind = reaped is not None and len(reaped) >= self.batch * self.max_batches
            try:
                await asyncio.wait_for(stop.wait(),
                                       min(self.interval, CATCH_UP_S) if behind else self.interval)
            except TimeoutError:
                continue
