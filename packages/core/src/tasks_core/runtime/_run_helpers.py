"""A run's helpers while its handler runs: the heartbeat and the progress writer.

The heartbeat renews the lease every ``lease_for / 3``; its first renew is started by the
worker's one timer (:mod:`tasks_core.runtime._heartbeats`), so a short run starts neither
helper. A renew showing ``cancelled`` stops the run as ``user``; ``LeaseLost`` or another
``run_id`` as ``superseded``. Progress is stored with the lease, throttled to one write per
``progress_interval``; none once the run was stopped for a cause other than a drain. A
run whose own machinery failed stops both at once and gives its task back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from tasks_core.errors import LeaseLost
from tasks_core.reasons import CancelReason
from tasks_core.runtime._failures import log_failure
from tasks_core.runtime._run_writes import RunWrites

__all__ = ["RunHelpers"]

log = logging.getLogger("tasks_core.worker")


class RunHelpers(RunWrites):
    """Heartbeat and progress of a run (a base of :class:`~tasks_core.runtime._run.Run`)."""

    def _start_helpers(self) -> None:
        """Arm the heartbeat: its task starts at the first renew, and the progress
        writer's at the first progress report (a short run starts neither). A run of a
        held claim renews first after a short run (``held_renews``): it reads ``running``."""
        held_renews = self.env.held_renews
        (held_renews if self.held and held_renews is not None else self.env.heartbeats).add(self)

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
        if self.env.held_renews is not None:
            self.env.held_renews.discard(self)
        if self._stop_signal is not None:
            self._stop_signal.set()
        if self._progress_ready is not None:
            self._progress_ready.set()
        self.env.heartbeats.discard(self)
        if flush and self._progress is not None and self._writer is None:
            await self._write_progress()  # reported, but the writer had not started yet
        if self._helpers:
            await asyncio.gather(*self._helpers, return_exceptions=True)

    async def give_back(self) -> None:
        """The run's own machinery failed unexpectedly: stop its helpers at once (no lease
        is renewed for a run that is not running) and give the task back, so it runs
        again — a release that fails leaves it to the lease's end. Never raises."""
        self._disarm()
        self._helpers_stopped = True
        self.env.heartbeats.discard(self)
        if self.env.held_renews is not None:
            self.env.held_renews.discard(self)
        for helper in self._helpers:
            helper.cancel()
        try:
            await self._release("its run failed unexpectedly")
        except Exception:
            log.exception("task %r: could not give the task back; it runs again once its "
                          "lease expires", self.task_id)

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
                log.warning("task %r: lease lost on renew%s", self.task_id, self.lapse_note())
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

