"""Work wakeups (private): ``wait_for_work`` read from a change stream.

A write that may make work claimable (a new task or run, an answer, a release, a retry
scheduled) sets ``_wake`` or inserts a ready document; :func:`_wake_filter` passes just
those changes for the queues waited on. A standalone server has no change streams:
``wait_for_work`` raises and workers poll with backoff.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pymongo.errors import PyMongoError
from tasks_core import rules
from tasks_core.durations import check_wait_timeout
from tasks_core.errors import CapabilityNotSupported

from tasks_store_mongo._base import MongoBase, operation
from tasks_store_mongo._driver import settle

__all__ = ["MongoWakeups"]

_MAX_WAIT_MS = 250


class MongoWakeups(MongoBase):
    """``wait_for_work``."""

    @operation
    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """Wait for a change that may make work claimable on ``queues`` (a create, a
        release, an answer, a retry scheduled), read from a change stream, or for
        ``timeout`` seconds (see ``TaskStore.wait_for_work``).

        Raises:
            CapabilityNotSupported: a standalone server (no change streams).
            InvalidInput: bad queues or timeout.
            StoreUnavailable: transient failure.
        """
        if not self.capabilities.wakeups:
            raise CapabilityNotSupported("wakeups need a MongoDB replica set (change streams)")
        wanted = sorted(rules.check_queues(queues))
        timeout = check_wait_timeout(timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pipeline = [{"$match": _wake_filter(wanted)}]
        await_ms = max(1, int(min(timeout * 1000, _MAX_WAIT_MS)))
        try:
            stream = await settle(
                self._tasks.watch(
                    pipeline, full_document="updateLookup", max_await_time_ms=await_ms
                )
            )
            try:
                while not self._closed:
                    if await stream.try_next() is not None:
                        return True
                    if loop.time() >= deadline:
                        return False
            finally:
                await settle(stream.close())
        except PyMongoError:
            if self._closed:
                return True
            raise
        return True


def _wake_filter(queues: list[str]) -> dict[str, Any]:
    """Change events that may make work claimable on ``queues``: a new task or run, or an
    update that set ``_wake`` (answered, released, retry scheduled)."""
    return {
        "fullDocument.queue": {"$in": queues},
        "$or": [
            {"operationType": {"$in": ["insert", "replace"]}, "fullDocument._ready": True},
            {
                "operationType": "update",
                "updateDescription.updatedFields._wake": {"$exists": True},
            },
        ],
    }
