"""``max_active_tasks_per_scope`` without counting a tenant's active tasks at every create.

Counting a tenant's active tasks (pending or waiting, not past their TTL) reads up to the
limit's number of index entries: a create in a tenant with a backlog of thousands cost
milliseconds of database time. A create needs to count only when the tenant may be full,
so each tenant has a *bound*: a number its active tasks cannot exceed.

- The number of stored tasks bounds every tenant (every active task is a stored one): in
  a store holding fewer tasks than the limit, no create ever counts.
- A tenant's stored bound lives in the ``task_locks`` row ``scope:<tenant>``, written by
  every create in the creating transaction: what it knew of the tenant's active tasks —
  the lower of the stored bound and the stored tasks, or the count when that left no
  room — plus the tasks it created; a create that the stored tasks alone let through
  reads nothing and raises a stored bound by the tasks it created.
- Only a create makes a task active (a finished or expired task never becomes active
  again; a replacement of a finished run is a create), and every create holds the
  creators' lock and writes the bound, so a bound never falls below the truth. Finished,
  expired, reaped and deleted tasks leave it higher than the truth: the next create that
  finds it at the limit counts, and the bound is exact again.

A create counts only when ``min(bound, stored tasks)`` leaves no room, and after a count
the bound is exact: a tenant far from its limit is counted once in many creates.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

from tasks_store_sql._schema import SCOPE_PREFIX

__all__ = ["Room", "room_for_one", "scope_lock"]


def scope_lock(tenant: str) -> str:
    """The ``task_locks`` row that holds ``tenant``'s bound."""
    return SCOPE_PREFIX + tenant


class Room(NamedTuple):
    """What :func:`room_for_one` found.

    Attributes:
        full: the tenant has no room: refuse the create.
        bound: the bound to store with the task; ``None``: raise a stored bound by one
            (the stored tasks alone showed room, and nothing was read).
    """

    full: bool
    bound: int | None


async def room_for_one(
    stored: int,
    limit: int,
    read_bound: Callable[[], Awaitable[int | None]],
    count: Callable[[], Awaitable[int]],
) -> Room:
    """Whether one more active task fits in a tenant (see the module docstring): fewer
    stored tasks than ``limit`` need no more; else the lower of the stored bound and the
    stored tasks, or when that leaves no room a count.

    Args:
        stored: the tasks stored besides the one the create replaces (under the
            creators' lock).
        limit: ``max_active_tasks_per_scope``.
        read_bound: reads the tenant's stored bound (``None``: none stored).
        count: counts the tenant's active tasks now, up to ``limit``.
    """
    if stored < limit:
        return Room(False, None)
    bound = await read_bound()
    known = stored if bound is None else min(bound, stored)
    if known >= limit:
        known = await count()
    return Room(known >= limit, known + 1)
