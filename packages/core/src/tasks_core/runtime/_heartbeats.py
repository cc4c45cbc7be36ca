"""When each run's heartbeat starts: one timer for all the runs of a worker.

A run renews its lease every ``lease_for / 3``, starting one interval after its handler
started; a run that ends before that never renews. Every run of a worker has the same
interval, so the runs waiting for their first renew are due in the order they started:
:class:`HeartbeatStarts` keeps them in that order and arms one timer, for the first of
them, instead of a timer per run that a short run would nearly always cancel.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["HeartbeatStarts"]


class _Beating(Protocol):
    def start_heartbeat(self) -> None: ...


class HeartbeatStarts:
    """Starts each added run's heartbeat ``interval`` seconds after it was added, unless it
    was discarded first.

    Args:
        interval: seconds from a run's start to its first renew (``lease_for / 3``).
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._due: dict[_Beating, float] = {}  # in the order added, so in the order due
        self._timer: asyncio.TimerHandle | None = None

    def add(self, run: _Beating) -> None:
        """Start ``run``'s heartbeat one interval from now."""
        loop = asyncio.get_running_loop()
        self._due[run] = loop.time() + self.interval
        if self._timer is None:
            self._timer = loop.call_at(self._due[run], self._fire)

    def discard(self, run: _Beating) -> None:
        """``run`` needs no heartbeat (its handler ended, or it was abandoned)."""
        self._due.pop(run, None)

    def _fire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        due = self._due
        while due:
            run, at = next(iter(due.items()))
            if at > now:
                self._timer = loop.call_at(at, self._fire)
                return
            del due[run]
            run.start_heartbeat()
