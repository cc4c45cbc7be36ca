"""``max_active_tasks_per_scope`` on a standalone server (private): an exact counter.

A standalone server runs no multi-document transaction, so counting a tenant's active
tasks and then inserting one cannot be one step: two creates would both count below the
limit and both insert. Instead each tenant has a counter document in ``PREFIX.counters``,
``{_id: "active:<tenant>", n}``, and the rule kept is:

    ``n`` >= the number of the tenant's task documents marked ``_scope: <tenant>``
    >= the number of its active (not terminal, not expired) tasks created with the
    limit on,

so the limit can never be overshot, and every mark is given back when it stops counting:

- **create** takes a unit first, with one conditional ``$inc`` (``n < cap``) — a single
  document update, atomic on every server, so of concurrent creates at most ``cap - n``
  pass — then inserts the task marked; a create that fails after that gives the unit back.
- **finishing** (a terminal transition, a TTL passing) writes nothing here: marked tasks
  that no longer count are released when a create finds the counter full — each unmarked
  by one conditional update (only one releaser wins it; the write tag changes, so a
  compare-and-set decided on the marked document re-reads), then ``n`` lowered by the
  number won — and the create tries again.
- **delete, reap, replace** of a marked document give its unit back after the write.

A process dying between two of these writes leaves ``n`` one too high for that tenant
(a create refused one task early), never too low. The limit counts the tasks created
with it on: the first limited create of a tenant (the one that creates its counter)
counts the tenant's active tasks from before. Replica sets do not use this module: there
the count and the insert are one transaction (``MongoBase._check_active``).
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
