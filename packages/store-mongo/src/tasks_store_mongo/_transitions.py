"""Transitions (private): ``transition`` and ``transition_many``.

The decision is :func:`tasks_core.storekit.plan_transitions`; this module loads the task
documents, hands them over as ``storekit.LoadedTask``s and writes the plan back by
compare-and-set (see ``_base``), reading again and re-deciding when another writer won.
A write that may make work claimable sets ``_wake`` for ``wait_for_work``; cancels reach
holders through the change stream of ``_cancels``. ``transition_many`` (replica sets and
sharded clusters: capability ``batch_transitions``) is one multi-document transaction;
two batches writing one task conflict and the loser runs again from its reads.
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
from tasks_core.models import Lease, Snapshot, TaskStatus

from tasks_store_mongo import _codec
from tasks_store_mongo._base import CAS_ATTEMPTS, MongoBase, operation
from tasks_store_mongo._driver import TransientConflict

__all__ = ["MongoTransitions"]


class _Loaded:
    """A task document loaded for a transition (a ``storekit.LoadedTask``); the records
    the plan applied to it so far are in :attr:`added` (a later item of a batch sees
    them, as replays)."""

    def __init__(self, task_id: str, doc: Mapping[str, Any]) -> None:
        self.task_id = task_id
        self.doc = doc
        self._snapshot: Snapshot | None = None
        self.added: list[EventRecord] = []

    @property
    def token(self) -> str | None:
        return _codec.token_of(self.task_id, self.doc)

    @property
    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            self._snapshot = _codec.decode_task(self.task_id, self.doc)
        return self._snapshot

    def earlier(self, event_id: str) -> Callable[[], EventRecord] | None:
        for record in self.added:
            if record.event_id == event_id:
                return functools.partial(_same, record)
        position = _codec.find_event(self.task_id, self.doc, event_id)
        if position is None:
            return None
        return functools.partial(_codec.record_at, self.task_id, self.doc, position)

    def update(self, snapshot: Snapshot, record: EventRecord) -> None:
        self._snapshot = snapshot
        self.added.append(record)


def _same(record: EventRecord) -> EventRecord:
    return record


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

    @operation
    async def transition_many(
        self, items: Sequence[rules.BatchItem]
    ) -> builtins.list[Transition | TasksError]:
        """Apply several transitions in one transaction (see ``TaskStore.transition_many``):
        every task the items name is loaded, all items are planned in order, and each
        changed task is written by its own compare-and-set (all of its new records
        ``$push``ed at once). Two batches writing one task conflict
        (``TransientTransactionError``): the loser is rolled back, nothing of it reported,
        and runs again from the read — so it sees the winner and gets ``RevisionConflict``.

        Raises:
            CapabilityNotSupported: a standalone server (no transactions: a batch could
                not be one atomic step).
            TypeError, InvalidInput: a malformed batch (nothing is read or written).
            StoreUnavailable: the transaction kept conflicting, or the server is
                unreachable; nothing written.
        """
        if not self._transactions:
            raise CapabilityNotSupported(
                "MongoStore offers batch_transitions on a replica set or a sharded cluster "
                "only (a standalone server has no transactions); call transition() per task"
            )
        checked = rules.check_batch(items)
        if not checked:
            return []
        for attempt in range(CAS_ATTEMPTS):
            try:
                plan: storekit.TransitionPlan = await self._atomically(
                    functools.partial(self._write_batch, checked)
                )
            except TransientConflict:
                await self._contended(attempt)
                continue
            return plan.results
        raise AssertionError("unreachable")  # pragma: no cover

    async def _write_batch(
        self, items: builtins.list[rules.BatchItem], session: Any
    ) -> storekit.TransitionPlan:
        """Load, plan and write ``items`` inside the transaction of ``session``.

        Raises:
            TransientConflict: a compare-and-set missed (the whole step is re-run).
        """
        ids = builtins.list(dict.fromkeys(task_id for task_id, *_ in items))
        loaded: dict[str, _Loaded] = {}
        async for doc in self._tasks.find({"_id": {"$in": ids}}, session=session):
            loaded[doc["_id"]] = _Loaded(doc["_id"], doc)
        plan = storekit.plan_transitions(items, loaded, await self._now())
        for task_id in dict.fromkeys(task_id for task_id, _ in plan.events):
            task = loaded[task_id]
            update = self._update(task.snapshot, wake=task.snapshot.queue in plan.wake
                                  and task.snapshot.status == TaskStatus.PENDING)
            update["$push"] = {
                "_history": {"$each": [_codec.encode_record(r) for r in task.added]}
            }
            if not await self._cas(task.doc, update, session=session):
                raise TransientConflict("a task of the batch changed under the transaction")
        return plan
