"""Broken stores for limits: each takes a bound the wrong way (exclusive where it is
inclusive, or cuts a value down instead of refusing it). ``test_self.py`` names the
contract test — at exactly the limit and one past it — that catches each.
"""

from __future__ import annotations

import builtins
from typing import Any

from tasks_core import Claim, InvalidInput, Lease
from tasks_core._inert import inert
from tasks_store_memory import MemoryStore

__all__ = [
    "BatchOf1000Refused",
    "ClaimLimitBelow1000",
    "LongLeasesCutTo7Days",
    "WorkerIdsCutAt255",
    "WorkerIdsEscaped",
]


class WorkerIdsCutAt255(MemoryStore):
    """Refuses a worker id of 256 characters (the bound taken as exclusive)."""

    def _check(self, worker_id: Any) -> None:
        if isinstance(worker_id, str) and len(worker_id) >= 256:
            raise InvalidInput("worker_id must be shorter than 256 characters")

    async def claim(self, task_id: str, worker_id: str, lease_for: float) -> Claim:
        self._check(worker_id)
        return await super().claim(task_id, worker_id, lease_for)

    async def claim_next(self, worker_id: str, lease_for: float, **options: Any
                         ) -> builtins.list[Claim]:
        self._check(worker_id)
        return await super().claim_next(worker_id, lease_for, **options)


class WorkerIdsEscaped(MemoryStore):
    """Takes a worker id that is not printable, escaped, instead of refusing it."""

    async def claim(self, task_id: str, worker_id: str, lease_for: float) -> Claim:
        return await super().claim(task_id, inert(worker_id), lease_for)

    async def claim_next(self, worker_id: str, lease_for: float, **options: Any
                         ) -> builtins.list[Claim]:
        return await super().claim_next(inert(worker_id), lease_for, **options)


class ClaimLimitBelow1000(MemoryStore):
    """Refuses ``claim_next(limit=1000)`` (the bound taken as exclusive)."""

    async def claim_next(self, worker_id: str, lease_for: float, **options: Any
                         ) -> builtins.list[Claim]:
        limit = options.get("limit", 1)
        if isinstance(limit, int) and limit >= 1000:
            raise InvalidInput("limit must be below 1000")
        return await super().claim_next(worker_id, lease_for, **options)


class BatchOf1000Refused(MemoryStore):
    """Refuses a ``transition_many`` of 1000 items (the bound taken as exclusive)."""

    async def transition_many(self, items: Any) -> builtins.list[Any]:
        if len(items) >= 1000:
            raise InvalidInput("transition_many takes fewer than 1000 items")
        return await super().transition_many(items)


class LongLeasesCutTo7Days(MemoryStore):
    """Cuts a lease of up to a second past 7 days down to 7 days instead of refusing it."""

    @staticmethod
    def _cut(lease_for: Any) -> Any:
        if isinstance(lease_for, float | int) and 604800 < lease_for <= 604801:
            return 604800
        return lease_for

    async def claim(self, task_id: str, worker_id: str, lease_for: float) -> Claim:
        return await super().claim(task_id, worker_id, self._cut(lease_for))

    async def claim_next(self, worker_id: str, lease_for: float, **options: Any
                         ) -> builtins.list[Claim]:
        return await super().claim_next(worker_id, self._cut(lease_for), **options)

    async def renew(self, lease: Lease, lease_for: float) -> Claim:
        return await super().renew(lease, self._cut(lease_for))
