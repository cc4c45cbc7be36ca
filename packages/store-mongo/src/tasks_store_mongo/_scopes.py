"""``max_active_tasks_per_scope`` on a standalone server (private): an exact counter.

No multi-document transaction makes a count and an insert one step, so each tenant has a
counter document ``{_id: "active:<tenant>", n}`` in ``PREFIX.counters``, and each task it
holds a unit for is marked ``_scope: <tenant>``. Rule: ``n`` >= the marked tasks >= the
tenant's active tasks created with the limit on, so the limit is never overshot: a create
takes a unit by one conditional ``$inc`` (``n < cap``) before its insert (given back if the
create fails); finished marked tasks are released when a create finds the counter full;
delete, reap and replace give their unit back. A crash between two writes leaves ``n``
one too high (a create refused early), never too low. Replica sets use a transaction
instead (``MongoBase._check_active``). docs/mongodb.md, "The tenant limit on a standalone
server", has the whole argument.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo.errors import DuplicateKeyError
from tasks_core.errors import CapacityExceeded

from tasks_store_mongo import _codec
from tasks_store_mongo._base import CAS_ATTEMPTS

__all__ = ["MARK", "ensure", "give_back", "release_finished", "reserve"]

MARK = "_scope"
"""The task document's field naming the tenant whose counter holds a unit for it."""


def _key(tenant: str) -> str:
    return f"active:{tenant}"


def _active(now: datetime) -> dict[str, Any]:
    return {
        "status": {"$in": list(_codec.ACTIVE_STATUSES)},
        "$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}],
    }


def _finished(now: datetime) -> dict[str, Any]:
    return {
        "$or": [
            {"status": {"$nin": list(_codec.ACTIVE_STATUSES)}},
            {"expires_at": {"$lte": now}},
        ]
    }


async def ensure(counters: Any, tasks: Any, tenant: str, now: datetime) -> None:
    """Create the tenant's counter if it has none; the create that made it counts (marks)
    the tenant's active tasks that are not marked yet — created while the limit was off."""
    try:
        made = await counters.update_one(
            {"_id": _key(tenant)}, {"$setOnInsert": {"n": 0}}, upsert=True
        )
    except DuplicateKeyError:  # a concurrent first create made it
        return
    if made.upserted_id is None:
        return
    adopted = 0
    cursor = tasks.find({"tenant": tenant, MARK: None, **_active(now)}, {"_id": 1})
    async for doc in cursor:
        won = await tasks.update_one(
            {"_id": doc["_id"], MARK: None, **_active(now)},
            {"$set": {MARK: tenant, "_w": _codec.new_tag()}},
        )
        adopted += won.modified_count
    if adopted:
        await counters.update_one({"_id": _key(tenant)}, {"$inc": {"n": adopted}})


async def reserve(counters: Any, tasks: Any, tenant: str, cap: int, now: datetime) -> None:
    """Take one unit of ``tenant``'s counter, releasing finished marked tasks when it is
    full; the caller inserts the task marked (``MARK: tenant``) or gives the unit back.

    Raises:
        CapacityExceeded: every unit counts an active task (nothing was written but the
            release of finished ones, which changes no task's state).
    """
    for _ in range(CAS_ATTEMPTS):
        taken = await counters.update_one(
            {"_id": _key(tenant), "n": {"$lt": cap}}, {"$inc": {"n": 1}}
        )
        if taken.matched_count == 1:
            return
        if not await release_finished(counters, tasks, tenant, now):
            break
    raise CapacityExceeded("max_active_tasks_per_scope")


async def release_finished(counters: Any, tasks: Any, tenant: str, now: datetime) -> int:
    """Unmark ``tenant``'s marked tasks that are terminal or expired at ``now`` and lower
    its counter by the number this call unmarked (a mark released by a concurrent call is
    that call's to count). Returns that number."""
    released = 0
    cursor = tasks.find({MARK: tenant, **_finished(now)}, {"_id": 1})
    async for doc in cursor:
        won = await tasks.update_one(
            {"_id": doc["_id"], MARK: tenant, **_finished(now)},
            {"$unset": {MARK: ""}, "$set": {"_w": _codec.new_tag()}},
        )
        released += won.modified_count
    await give_back(counters, tenant, released)
    return released


async def give_back(counters: Any, tenant: str, count: int = 1, session: Any = None) -> None:
    """Lower ``tenant``'s counter by ``count`` units (a failed create's, or the marks of
    documents deleted or replaced)."""
    if count:
        await counters.update_one(
            {"_id": _key(tenant)}, {"$inc": {"n": -count}}, session=session
        )
