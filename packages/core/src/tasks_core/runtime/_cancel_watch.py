"""Cancels recorded by other processes, pushed by the store to a worker.

A store with ``cancel_wakeups`` reports the cancel of a task the worker watches — one it
runs (not yet asked to stop) or holds unstarted — while the worker waits on
``wait_for_cancels``. A report is a hint: the task is read (every tenant) and the worker
stops that run or drops that held claim when the snapshot says so. Without the capability,
or while the wait fails (logged once per outage), a cancel from another process reaches a
run at its next heartbeat (``lease_for / 3``) and a held claim when its run starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from tasks_core.errors import TaskNotFound
from tasks_core.models import Claim, Snapshot
from tasks_core.runtime._failures import log_failure
from tasks_core.store import TaskStore

__all__ = ["CancelWatch", "WatchedTasks"]

log = logging.getLogger("tasks_core.worker")


class WatchedTasks(Collection[str]):
    """The ids a worker watches for cancels, read live: its runs whose token holds no
    cause yet, and its held claims.

    The store may test membership from another thread (a shared in-process store): a held
    claim changing meanwhile counts as watched, since a spurious report costs one read.
    """

    def __init__(self, runs: Mapping[str, Any], held: deque[tuple[float, Claim]]) -> None:
        self._runs = runs
        self._held = held

    def __contains__(self, task_id: object) -> bool:
        run = self._runs.get(task_id) if isinstance(task_id, str) else None
        if run is not None and not run.token.cancelled:
            return True
        try:
            return any(claim.snapshot.id == task_id for _, claim in self._held)
        except RuntimeError:  # changed by the worker's thread while another thread looked
            return True

    def _ids(self) -> list[str]:
        ids = [task_id for task_id, run in list(self._runs.items()) if not run.token.cancelled]
        return ids + [claim.snapshot.id for _, claim in list(self._held)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids())

    def __len__(self) -> int:
        return len(self._ids())


class CancelWatch:
    """Waits on the store for cancels of the watched tasks and hands each cancelled task's
    snapshot to ``found``, until cancelled (see the module docstring).

    Args:
        store: a store with ``cancel_wakeups``.
        watched: the live ids to watch.
        found: called with the snapshot of a reported task.
        interval: the longest single wait, and the pause after a failed wait, in seconds.
    """

    def __init__(
        self,
        store: TaskStore,
        watched: Collection[str],
        found: Callable[[Snapshot], None],
        interval: float,
    ) -> None:
        self._store = store
        self._watched = watched
        self._found = found
        self._interval = interval

    async def run(self) -> None:
        """Watch until this coroutine is cancelled."""
        failing = False
        while True:
            try:
                reported = await self._store.wait_for_cancels(self._watched, self._interval)
            except Exception as exc:
                if not failing:
                    log.warning("waiting for cancels failed (%r); until it works again, a "
                                "cancel from another process arrives at the next heartbeat",
                                exc)
                    failing = True
                await asyncio.sleep(self._interval)  # the pause between tries, not a sync
                continue
            if failing:
                log.info("waiting for cancels works again")
                failing = False
            for task_id in reported:
                await self._read(task_id)

    async def _read(self, task_id: str) -> None:
        try:
            snapshot = await self._store.get(task_id, tenant=None)
        except TaskNotFound:
            return
        except Exception:
            log_failure(log, "task %r: reading a reported cancel failed", task_id)
            return
        self._found(snapshot)
