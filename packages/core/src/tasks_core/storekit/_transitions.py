"""The glue of ``transition`` and ``transition_many``: find the task, decide each item
with :func:`tasks_core.rules.decide_transition` in order (a later item sees the earlier
ones), and plan what to write — changed tasks, history records, watchers granted, the
queues to wake and the cancels to push. A store loads and locks the tasks the items
name, then writes the plan in the same atomic step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from tasks_core.authority import Access, Owner
from tasks_core.errors import TaskNotFound, TasksError
from tasks_core.events import Event, EventRecord, Transition, WatcherAdded
from tasks_core.models import Lease, Snapshot, TaskStatus
from tasks_core.rules import BatchItem, decide_transition

__all__ = ["LoadedTask", "TransitionPlan", "plan_transitions", "transition_result"]


class LoadedTask(Protocol):
    """A task a store has loaded (and locked) for a transition."""

    @property
    def token(self) -> str | None:
        """The stored lease token."""

    @property
    def snapshot(self) -> Snapshot:
        """The task as the plan left it so far.

        Raises:
            StoreCorrupt: the stored record fails validation.
        """

    def earlier(self, event_id: str) -> Callable[[], EventRecord] | None:
        """A reader of the history entry of ``event_id`` (``None``: never applied); it
        raises ``StoreCorrupt`` for a damaged entry."""

    def update(self, snapshot: Snapshot, record: EventRecord) -> None:
        """Keep the task as an applied event left it, and the event's record (later
        items of the plan see both)."""


@dataclass
class TransitionPlan:
    """What the items decided: one ``Transition`` or refusal each, in order, and what to
    write in the same atomic step.

    Attributes:
        results: one outcome per item.
        events: ``(task_id, record)`` of every applied event, in order.
        watchers: ``(task_id, principal)`` of every watcher granted.
        wake: queues where work may have become claimable.
        cancelled: tasks cancelled (push the cancel to their holders at commit).
    """

    results: list[Transition | TasksError] = field(default_factory=list)
    events: list[tuple[str, EventRecord]] = field(default_factory=list)
    watchers: list[tuple[str, Owner]] = field(default_factory=list)
    wake: set[str] = field(default_factory=set)
    cancelled: set[str] = field(default_factory=set)


def plan_transitions(
    items: Sequence[BatchItem],
    loaded: Mapping[str, LoadedTask],
    now: datetime,
    *,
    lease_check: Callable[..., None] | None = None,
    revision_check: Callable[[Snapshot, int, datetime], None] | None = None,
) -> TransitionPlan:
    """Decide every item at ``now`` against ``loaded`` (changed through
    :meth:`LoadedTask.update`). A refusal is the item's result; nothing of it is
    planned. ``lease_check``/``revision_check``: see
    :func:`~tasks_core.rules.decide_transition`."""
    plan = TransitionPlan()
    for task_id, expected_revision, event, authority in items:
        try:
            plan.results.append(_one(
                plan, loaded.get(task_id), task_id, expected_revision, event, authority, now,
                lease_check, revision_check,
            ))
        except TasksError as refusal:
            plan.results.append(refusal)
    return plan


def transition_result(plan: TransitionPlan) -> Transition:
    """The outcome of a plan of one item (``transition``).

    Raises:
        TasksError: the item's refusal.
    """
    (result,) = plan.results
    if isinstance(result, TasksError):
        raise result
    return result


def _one(
    plan: TransitionPlan,
    task: LoadedTask | None,
    task_id: str,
    expected_revision: int,
    event: Event,
    authority: Lease | Access,
    now: datetime,
    lease_check: Callable[..., None] | None,
    revision_check: Callable[[Snapshot, int, datetime], None] | None,
) -> Transition:
    if task is None:
        raise TaskNotFound(task_id)
    decision = decide_transition(
        task.snapshot, task.token, task.earlier(event.event_id), expected_revision, event,
        authority, now, lease_check=lease_check, revision_check=revision_check,
    )
    if decision.write is None:
        return decision.transition
    new, record = decision.write
    task.update(new, record)
    plan.events.append((task_id, record))
    if isinstance(event, WatcherAdded):
        plan.watchers.append((task_id, event.principal))
    if new.status == TaskStatus.PENDING:
        plan.wake.add(new.queue)
    elif new.status == TaskStatus.CANCELLED:
        plan.cancelled.add(task_id)
    return decision.transition
