"""The decisions of ``create_many`` (capability ``batch_create``): the arguments, a taken
id, and the room a batch needs in both capacity limits — for the batch as a whole.

A store checks the arguments (:func:`check_create_many`), takes its creators' lock, loads
the tasks that hold any of the batch's ids and the counts the limits need, asks
:func:`check_batch_room` (which refuses a taken id before any limit), then writes
:func:`new_snapshots` in the same atomic step — or nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from tasks_core.errors import CapacityExceeded, InvalidInput, TaskExists
from tasks_core.models import NewTask, Snapshot, StoreLimits
from tasks_core.rules import new_snapshot, present

__all__ = [
    "MAX_BATCH",
    "check_batch_room",
    "check_create_many",
    "check_stored_room",
    "new_snapshots",
    "refuse_taken",
    "tenant_counts",
]

MAX_BATCH = 1000
"""The most tasks one ``create_many`` stores."""


def check_create_many(news: object) -> list[NewTask]:
    """The batch as a list, checked before anything is read.

    Raises:
        InvalidInput: not a sequence of ``NewTask``, more than :data:`MAX_BATCH` tasks, or
            an id twice (the runtime decides a repeated id as ``submit`` would).
    """
    if not isinstance(news, Sequence) or isinstance(news, (str, bytes)):
        raise InvalidInput("create_many() takes a list of NewTask")
    batch = list(news)
    if len(batch) > MAX_BATCH:
        raise InvalidInput(f"create_many() takes at most {MAX_BATCH} tasks")
    if not all(isinstance(new, NewTask) for new in batch):
        raise InvalidInput("create_many() takes a list of NewTask")
    if len({new.id for new in batch}) != len(batch):
        raise InvalidInput("create_many() takes distinct ids")
    return batch


def tenant_counts(news: Sequence[NewTask]) -> dict[str, int]:
    """The batch's tasks per tenant, tenants in the order they first appear."""
    return dict(Counter(new.tenant for new in news))


def check_batch_room(
    news: Sequence[NewTask],
    *,
    taken: Mapping[str, Snapshot],
    stored: int,
    active: Callable[[str], int],
    limits: StoreLimits,
    now: datetime,
) -> None:
    """Refuse the whole batch when an id is taken or the batch does not fit.

    Args:
        news: the checked batch.
        taken: the stored tasks holding any of the batch's ids (expired ones included).
        stored: the tasks stored now (``max_tasks`` counts every task).
        active: a tenant's active tasks now (``rules.counts_as_active``), read only for
            the tenants of the batch and only when ``max_active_tasks_per_scope`` is set
            and the stored tasks alone do not show room.
        limits: the store's limits.
        now: the store clock.

    Raises:
        TaskExists: the first task of ``news`` whose id is taken (before any limit).
        CapacityExceeded: ``max_tasks`` (the stored tasks plus the batch), then
            ``max_active_tasks_per_scope`` (a tenant's active tasks plus its tasks of the
            batch).
    """
    refuse_taken(news, taken, now)
    check_stored_room(len(news), stored, limits)
    cap = limits.scope_cap
    for tenant, count in tenant_counts(news).items():
        if stored + count > cap and active(tenant) + count > cap:
            raise CapacityExceeded("max_active_tasks_per_scope")


def refuse_taken(news: Sequence[NewTask], taken: Mapping[str, Snapshot], now: datetime) -> None:
    """Refuse the batch when any of its ids is taken (the first of ``news`` is named).

    Raises:
        TaskExists: with the stored task as a reader sees it at ``now``.
    """
    for new in news:
        current = taken.get(new.id)
        if current is not None:
            raise TaskExists(present(current, now))


def check_stored_room(count: int, stored: int, limits: StoreLimits) -> None:
    """Refuse ``count`` new tasks beside ``stored`` ones past ``max_tasks``.

    Raises:
        CapacityExceeded: ``max_tasks``.
    """
    if stored + count > limits.tasks_cap:
        raise CapacityExceeded("max_tasks")


def new_snapshots(news: Sequence[NewTask], now: datetime) -> list[Snapshot]:
    """The first snapshot of every task of the batch, all created at ``now``."""
    return [new_snapshot(new, now) for new in news]
