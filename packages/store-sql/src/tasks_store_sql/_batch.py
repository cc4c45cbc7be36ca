"""Deciding a batch of transitions on rows already locked: the one place where the SQL
store turns ``(task_id, expected_revision, event, authority)`` items into results and
writes, whatever the dialect.

The caller locks the rows of every task the items name (in id order), reads the clock
after the locks are held and looks up the items' event ids in the history, then
:func:`decide` applies :mod:`tasks_core.rules` to each item in order — exactly the steps of
``transition`` (find, authorize, replay, revision, apply), a later item seeing the earlier
ones — and the caller writes :class:`Plan` in the same transaction: each changed row once
(``UPDATE … WHERE id AND row_version``), the applied events, new watchers, wakeups and
the notices of cancels (PostgreSQL: ``wait_for_cancels``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tasks_core import rules
from tasks_core.authority import Access
from tasks_core.errors import StoreCorrupt, TaskNotFound, TasksError
from tasks_core.events import Event, EventRecord, Transition, WatcherAdded
from tasks_core.models import Lease, Snapshot, TaskStatus

from tasks_store_sql import _codec

__all__ = ["Loaded", "Plan", "decide"]


@dataclass(eq=False)
class Loaded:
    """A locked ``tasks`` row, and what the batch did to it so far.

    Attributes:
        id: the task id.
        text: the stored snapshot (JSON text), decoded on first use.
        token: the lease token column.
        row_version: the version read under the lock (the write is guarded by it).
        events: the history entries of this task whose event ids the batch names
            (stored JSON text, or a record the batch itself applied).
    """

    id: str
    text: str
    token: str | None
    row_version: int
    events: dict[str, str | EventRecord] = field(default_factory=dict)
    _snapshot: Snapshot | None = None
    changed: bool = False

    @property
    def snapshot(self) -> Snapshot:
        """The task as the batch left it so far.

        Raises:
            StoreCorrupt: the stored snapshot fails validation.
        """
        if self._snapshot is None:
            self._snapshot = _codec.decode_snapshot(self.id, self.text)
        return self._snapshot

    def update(self, snapshot: Snapshot, token: str | None) -> None:
        """Record a new state of the row (written once, at the end)."""
        self._snapshot = snapshot
        self.token = token
        self.changed = True

    def values(self) -> dict[str, Any]:
        """The columns to write (see :func:`tasks_store_sql._codec.projection`)."""
        return _codec.projection(self.snapshot, self.token)


@dataclass
class Plan:
    """What a batch returns and what it writes.

    Attributes:
        results: one ``Transition`` or refusal per item, in order.
        events: ``(task_id, record)`` of every applied event, in order.
        members: ``task_members`` rows of watchers granted.
        wake: queues where work may have become claimable.
        cancelled: tasks the batch cancelled (their waiters are told at commit).
    """

    results: list[Transition | TasksError] = field(default_factory=list)
    events: list[tuple[str, EventRecord]] = field(default_factory=list)
    members: list[dict[str, Any]] = field(default_factory=list)
    wake: set[str] = field(default_factory=set)
    cancelled: set[str] = field(default_factory=set)

    def rows(self, loaded: dict[str, Loaded]) -> list[Loaded]:
        """The rows to write, in id order."""
        return [row for _, row in sorted(loaded.items()) if row.changed]


def decide(items: Sequence[rules.BatchItem], loaded: dict[str, Loaded], now: datetime) -> Plan:
    """Decide every item in order against ``loaded`` (changed in place); see the module
    docstring. A refusal becomes the item's result; nothing of it is planned."""
    plan = Plan()
    for task_id, expected_revision, event, authority in items:
        try:
            plan.results.append(
                _one(plan, loaded.get(task_id), task_id, expected_revision, event, authority,
                     now)
            )
        except TasksError as refusal:
            plan.results.append(refusal)
    return plan


def _one(
    plan: Plan,
    row: Loaded | None,
    task_id: str,
    expected_revision: int,
    event: Event,
    authority: Lease | Access,
    now: datetime,
) -> Transition:
    if row is None:
        raise TaskNotFound(task_id)
    earlier = row.events.get(event.event_id)
    decision = rules.decide_transition(
        row.snapshot,
        row.token,
        None if earlier is None else lambda: _record(task_id, earlier),
        expected_revision,
        event,
        authority,
        now,
    )
    if decision.write is None:
        return decision.transition
    new, record = decision.write
    row.update(new, row.token)
    row.events[event.event_id] = record
    plan.events.append((task_id, record))
    if isinstance(event, WatcherAdded):
        plan.members.append({
            "tenant": event.principal.tenant,
            "user_id": event.principal.user_id,
            "task_id": task_id,
            "role": "watcher",
        })
    if new.status == TaskStatus.PENDING:
        plan.wake.add(new.queue)
    elif new.status == TaskStatus.CANCELLED:
        plan.cancelled.add(task_id)
    return decision.transition


def _record(task_id: str, entry: str | EventRecord) -> EventRecord:
    """A history entry: one this batch applied, or stored JSON text."""
    return entry if isinstance(entry, EventRecord) else _codec.decode_record(task_id, entry)


def corrupt_or(row: Loaded) -> Snapshot | None:
    """The row's snapshot, or ``None`` when it is corrupt (for scans that skip it)."""
    try:
        return row.snapshot
    except StoreCorrupt:
        return None
