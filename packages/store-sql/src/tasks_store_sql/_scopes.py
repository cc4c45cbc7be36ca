"""``max_active_tasks_per_scope`` without counting a tenant's active tasks at every create.

Counting reads up to the limit's number of index entries, a cost in proportion to the
tenant's backlog; a create needs to count only when the tenant may be full. So each
tenant has a *bound*, a number its active tasks cannot exceed: the stored tasks, or the
lower ``scope:<tenant>`` row of ``task_locks`` that every create writes. Rules: a create
counts only when ``min(bound, stored tasks)`` leaves no room, and after a count the
bound is exact; a bound never falls below the truth (only a create makes a task active,
and every create holds the creators' lock and writes the bound); finished, expired and
deleted tasks leave it above the truth until a create that finds no room counts them
out. How a create's bound is computed: :func:`room_for_one`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import NamedTuple

from tasks_core import storekit
from tasks_core.errors import CapacityExceeded
from tasks_core.models import NewTask, StoreLimits

from tasks_store_sql._schema import SCOPE_PREFIX

__all__ = ["Room", "room_for", "room_for_one", "rooms_for_batch", "scope_lock"]


def scope_lock(tenant: str) -> str:
    """The ``task_locks`` row that holds ``tenant``'s bound."""
    return SCOPE_PREFIX + tenant


class Room(NamedTuple):
    """What :func:`room_for_one` found.

    Attributes:
        full: the tenant has no room: refuse the create.
        bound: the bound to store with the task; ``None``: raise a stored bound by one
            (by the tasks created, :func:`room_for`: the stored tasks alone showed room,
            and nothing was read).
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
    stored tasks than ``limit`` need no more (in such a store no create ever counts);
    else the lower of the stored bound and the stored tasks, or when that leaves no room
    a count. The create stores what it knew plus the tasks it created; a create that the
    stored tasks alone let through read nothing, and raises a stored bound by the tasks
    it created.

    Args:
        stored: the tasks stored besides the one the create replaces (under the
            creators' lock).
        limit: ``max_active_tasks_per_scope``.
        read_bound: reads the tenant's stored bound (``None``: none stored).
        count: counts the tenant's active tasks now, up to ``limit``.
    """
    return await room_for(stored, limit, 1, read_bound, count)


async def room_for(
    stored: int,
    limit: int,
    tasks: int,
    read_bound: Callable[[], Awaitable[int | None]],
    count: Callable[[], Awaitable[int]],
) -> Room:
    """Whether ``tasks`` more active tasks fit in a tenant, as :func:`room_for_one`
    decides for one (a batch of ``create_many``: ``stored`` counts the tasks stored
    before it)."""
    if stored + tasks <= limit:
        return Room(False, None)
    bound = await read_bound()
    known = stored if bound is None else min(bound, stored)
    if known + tasks > limit:
        known = await count()
    return Room(known + tasks > limit, known + tasks)


async def rooms_for_batch(
    batch: Sequence[NewTask],
    stored: int,
    limits: StoreLimits,
    read_bound: Callable[[str], Awaitable[int | None]],
    count: Callable[[str], Awaitable[int]],
) -> dict[str, tuple[Room, int]]:
    """Each tenant's room for its tasks of ``batch`` among ``stored`` tasks
    (:func:`room_for`), and their number; the creators' row held. ``read_bound`` and
    ``count`` take the tenant.

    Raises:
        CapacityExceeded: ``max_tasks`` or ``max_active_tasks_per_scope``.
    """
    storekit.check_stored_room(len(batch), stored, limits)
    rooms: dict[str, tuple[Room, int]] = {}
    for tenant, tasks in storekit.tenant_counts(batch).items():
        room = await room_for(stored, limits.scope_cap, tasks,
                              partial(read_bound, tenant), partial(count, tenant))
        if room.full:
            raise CapacityExceeded("max_active_tasks_per_scope")
        rooms[tenant] = (room, tasks)
    return rooms
