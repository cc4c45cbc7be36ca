"""``counts`` of ``MongoStore`` (capability ``counts``, every deployment): the tasks of a
tenant by queue and status in one aggregation on the server.

The server groups the tenant's unexpired documents (the ``listing`` index's tenant
prefix) by queue, stored status and the three facts ``rules.present`` derives a status
from — a live lease (not ended, not expired), a held claim, a ``run_at`` ahead — so no
document crosses to the client; the groups are read here into statuses.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from tasks_core import rules
from tasks_core.errors import CapabilityNotSupported
from tasks_core.models import TaskStatus

from tasks_store_mongo._base import MongoBase, operation
from tasks_store_mongo._driver import settle

__all__ = ["MongoCounts"]


def _pipeline(tenant: str | None, now: datetime) -> list[dict[str, Any]]:
    visible: dict[str, Any] = {"$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}]}
    match = visible if tenant is None else {"$and": [{"tenant": tenant}, visible]}
    live = {"$and": [{"$eq": ["$status", TaskStatus.PENDING.value]},
                     {"$ne": [{"$ifNull": ["$claim.ended", False]}, True]},
                     {"$gt": ["$claim.expires_at", now]}]}
    key = {"queue": "$queue", "status": "$status", "live": live,
           "held": {"$eq": ["$claim.held", True]}, "ahead": {"$gt": ["$run_at", now]}}
    return [{"$match": match}, {"$group": {"_id": key, "n": {"$sum": 1}}}]


def _status(group: dict[str, Any]) -> TaskStatus:
    """The status the tasks of one group read (``rules.present`` on the group's facts)."""
    stored = TaskStatus(group["status"])
    if stored != TaskStatus.PENDING:
        return stored
    if group["live"]:
        return TaskStatus.CLAIMED if group["held"] else TaskStatus.RUNNING
    return TaskStatus.SCHEDULED if group["ahead"] else TaskStatus.PENDING


class MongoCounts(MongoBase):
    """``counts`` (see the module docstring)."""

    @operation
    async def counts(self, *, tenant: str | None) -> dict[tuple[str, TaskStatus], int]:
        """How many tasks of ``tenant`` read each status in each queue (see
        ``TaskStore.counts``); a document that fails validation counts as its fields say.

        Raises:
            CapabilityNotSupported: the capability is off.
            InvalidInput: ``tenant`` is neither a string nor ``None``.
            StoreUnavailable: transient failure.
        """
        if not self.capabilities.counts:
            raise CapabilityNotSupported("this store does not count tasks (capability 'counts')")
        rules.check_tenant(tenant)
        now = await self._now()
        tally: Counter[tuple[str, TaskStatus]] = Counter()
        cursor = await settle(self._tasks.aggregate(_pipeline(tenant, now)))
        try:
            async for row in cursor:
                group = row["_id"]
                tally[(group["queue"], _status(group))] += row["n"]
        finally:
            await settle(cursor.close())
        return dict(tally)
