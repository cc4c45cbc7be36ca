"""Group commit of a worker's terminal events, on stores with ``batch_transitions``.

A run that finished its handler hands its terminal event to the worker's
:class:`GroupCommit` and waits for its own result. The group writes what it holds with one
``store.transition_many`` (one transaction, one commit) as soon as no run of the worker is
still in its handler, ``window`` seconds passed since its first event, or it holds
``max_items``. Nothing weakens a completion: each item keeps its own revision and lease,
checked item by item (a stale lease is refused while the others apply); a crash before the
commit writes none of them (they run again once their leases expire); a whole group that
fails fails every waiting write, and each run retries its own (same event id).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tasks_core.errors import TasksError
from tasks_core.events import Event, Transition
from tasks_core.models import Lease
from tasks_core.runtime._outage import Outage
from tasks_core.store import TaskStore

__all__ = ["GroupCommit"]

log = logging.getLogger("tasks_core.worker")


@dataclass(eq=False)
class _Item:
    task_id: str
    revision: int
    event: Event
    lease: Lease
    future: asyncio.Future[Transition | TasksError]


class GroupCommit:
    """Batches terminal events into ``transition_many`` calls; see the module docstring.

    Args:
        store: a store with capability ``batch_transitions``.
        busy: how many runs of the worker are still executing their handler.
        window: the longest an event waits for company, in seconds.
        max_items: the most events in one group.
    """

    def __init__(
        self,
        store: TaskStore,
        busy: Callable[[], int],
        *,
        window: float = 0.003,
        max_items: int = 64,
    ) -> None:
        self.store = store
        self.busy = busy
        self.window = window
        self.max_items = max_items
        self.groups = 0
        self.items = 0
        self._pending: list[_Item] = []
        self._arrived = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._outage = Outage(log, "the group commit of outcomes",
                              "its runs try their events again")
        """Whole groups refused by the store, logged once per outage."""

    async def write(self, task_id: str, revision: int, event: Event, lease: Lease) -> Transition:
        """Send ``event`` with ``lease`` at ``revision`` in the next group; its result.

        Raises:
            TasksError: the store refused this item (``LeaseLost``, ``RevisionConflict``…)
                or the whole group failed (``StoreUnavailable``).
        """
        loop = asyncio.get_running_loop()
        item = _Item(task_id, revision, event, lease, loop.create_future())
        self._pending.append(item)
        self._arrived.set()
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush_loop(), name="tasks:group-commit")
        result = await item.future
        if isinstance(result, TasksError):
            raise result
        return result

    def idle(self) -> bool:
        """Whether nobody could add to the group soon: the worker runs no handler."""
        return self.busy() <= 0

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            deadline = loop.time() + self.window
            while len(self._pending) < self.max_items and not self.idle():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._arrived.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await self._arrived.wait()
            group, self._pending = (
                self._pending[: self.max_items], self._pending[self.max_items :]
            )
            await self._flush(group)

    async def _flush(self, group: list[_Item]) -> None:
        self.groups += 1
        self.items += len(group)
        try:
            results = await self.store.transition_many(
                [(i.task_id, i.revision, i.event, i.lease) for i in group]
            )
        except TasksError as exc:
            self._outage.failed()
            for item in group:
                if not item.future.done():
                    item.future.set_result(exc)
            return
        except Exception as exc:
            log.exception("group commit of %d event(s) failed", len(group))
            for item in group:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        except BaseException:
            for item in group:
                item.future.cancel()
            raise
        self._outage.worked()
        for item, result in zip(group, results, strict=True):
            if not item.future.done():
                item.future.set_result(result)

    def abandon(self) -> None:
        """The worker died: write nothing more (those tasks run again; at least once)."""
        if self._flusher is not None:
            self._flusher.cancel()
        for item in self._pending:
            item.future.cancel()
        self._pending.clear()
