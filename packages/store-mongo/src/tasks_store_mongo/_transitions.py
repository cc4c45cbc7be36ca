"""Transitions (private): ``transition``, and ``transition_many`` refused.

The decision is :func:`tasks_core.storekit.plan_transitions`'; this module loads the
task document, hands it over as a ``storekit.LoadedTask`` and writes the plan back by
compare-and-set (see ``_base``), reading again and re-deciding when another writer won.
A write that may make work claimable (the task is pending again) sets ``_wake`` for
``wait_for_work``; cancels reach holders through the change stream of ``_cancels``.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tasks_core import rules, storekit
from tasks_core.authority import Access
from tasks_core.errors import CapabilityNotSupported, TasksError
from tasks_core.events import Event, EventRecord, Transition
from tasks_core.models import Lease, Snapshot

from tasks_store_mongo import _codec
from tasks_store_mongo._base import CAS_ATTEMPTS, MongoBase, operation

__all__ = ["MongoTransitions"]


class _Loaded:
    """A task document loaded for a transition (a ``storekit.LoadedTask``) of one item:
    ``transition_many`` is not offered, so no plan here applies a second event."""

    def __init__(self, task_id: str, doc: Mapping[str, Any]) -> None:
        self.task_id = task_id
        self.doc = doc
        self._snapshot: Snapshot | None = None

    @property
    def token(self) -> str | None:
        return _codec.token_of(self.task_id, self.doc)

    @property
    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            self._snapshot = _codec.decode_task(self.task_id, self.doc)
        return self._snapshot

    def earlier(self, event_id: str) -> Callable[[], EventRecord] | None:
        position = _codec.find_event(self.task_id, self.doc, event_id)
        if position is None:
            return None
        return functools.partial(_codec.record_at, self.task_id, self.doc, position)

    def update(self, snapshot: Snapshot, record: EventRecord) -> None:
        self._snapshot = snapshot  # the record is the plan's (``plan.events``)


class MongoTransitions(MongoBase):
    """``transition`` and ``transition_many``."""

    @operation
    async def transition(
        self,
        task_id: str,
        expected_revision: int,
        event: Event,
        authority: Lease | Access,
    ) -> Transition:
        """Apply ``event`` atomically (see ``TaskStore.transition``).

        Raises:
            TaskNotFound, LeaseLost, AuthorizationError, EventIdReused, RevisionConflict,
            InvalidInput, StoreCorrupt, StoreUnavailable.
        """
        if not isinstance(authority, (Lease, Access)):
            raise TypeError("authority must be a Lease or an Access")
        items = [(task_id, expected_revision, event, authority)]
        for attempt in range(CAS_ATTEMPTS):
            doc = await self._load(task_id, history=True)
            loaded = {} if doc is None else {task_id: _Loaded(task_id, doc)}
            plan = storekit.plan_transitions(items, loaded, await self._now())
            if not plan.events:  # a refusal, or the event already applied
                return storekit.transition_result(plan)
            task, ((_, record),) = loaded[task_id], plan.events
            update = self._update(task.snapshot, record=record, wake=bool(plan.wake))
            if await self._cas(task.doc, update):
                return storekit.transition_result(plan)
            await self._contended(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def transition_many(
        self, items: Sequence[rules.BatchItem]
    ) -> builtins.list[Transition | TasksError]:
        """Not offered (capability ``batch_transitions`` is off): each task is its own
        document, so a batch would be one transaction per call on a replica set and
        nothing at all on a standalone server; the runtime writes one by one instead.

        Raises:
            CapabilityNotSupported: always.
        """
        raise CapabilityNotSupported(
            "MongoStore has no batch_transitions; call transition() per task"
        )
