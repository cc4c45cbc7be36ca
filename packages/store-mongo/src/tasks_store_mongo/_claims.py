"""Claims (private): ``claim``, ``claim_next`` (exclusive queues included) and
``next_available``.

The decisions are :mod:`tasks_core.storekit`'s; this module fetches and writes. A claim
is a compare-and-set on the task document like every other write (see ``_base``).
``claim_next`` streams candidates from the ``claim_next`` index in claim order
(``storekit.claim_order``), offers each to a ``storekit.ClaimScan`` and writes its
decision by compare-and-set; a candidate lost to another writer is withdrawn and
skipped, never waited for. An exclusive queue is claimed inside a transaction that first
writes the queue's own document, so exclusive claimers of one queue always conflict and
serialize.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from tasks_core import rules, storekit
from tasks_core.errors import CapabilityNotSupported, TaskNotFound
from tasks_core.models import Claim, TaskStatus
from tasks_core.storekit import ClaimScan, Started

from tasks_store_mongo import _codec
from tasks_store_mongo._base import CAS_ATTEMPTS, NO_HISTORY, MongoBase, operation
from tasks_store_mongo._driver import settle

__all__ = ["MongoClaims"]

_WON = "won"  # the decision is written
_LOST = "lost"  # a compare-and-set lost to another writer
_BUSY = "busy"  # an exclusive queue already has a live lease


class MongoClaims(MongoBase):
    """``claim``, ``claim_next`` and ``next_available``."""

    @operation
    async def claim(self, task_id: str, worker_id: str, lease_for: float) -> Claim:
        """Claim exactly ``task_id`` (see ``TaskStore.claim``).

        Raises:
            TaskNotFound, Unavailable, Deferred, InvalidInput, StoreCorrupt,
            StoreUnavailable.
        """
        storekit.check_claim(task_id, worker_id, lease_for)
        for attempt in range(CAS_ATTEMPTS):
            doc = await self._load(task_id)
            if doc is None:
                raise TaskNotFound(task_id)
            now = await self._now()
            started = storekit.claim_one(
                _codec.decode_task(task_id, doc), worker_id, lease_for, now
            )
            if await self._cas(doc, self._started_update(started)):
                return storekit.claim_result(started)
            await self._contended(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    @operation
    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
        start: int | None = None,
    ) -> builtins.list[Claim]:
        """Claim up to ``limit`` claimable tasks, the first in claim order (see
        ``TaskStore.claim_next``).

        Candidates stream in claim order from the ``claim_next`` index; each decision of
        the scan is written by compare-and-set, and one lost to another writer is
        withdrawn and skipped, never waited for.

        Raises:
            CapabilityNotSupported: ``exclusive`` on a deployment without transactions.
            InvalidInput: bad arguments.
            StoreUnavailable: transient failure.
        """
        request = storekit.check_claim_next(worker_id, lease_for, queues, limit, exclusive,
                                            start)
        if exclusive and not self.capabilities.exclusive_queues:
            raise CapabilityNotSupported(
                "exclusive queues need a MongoDB replica set (multi-document transactions)"
            )
        now = await self._now()
        busy = [q for q in sorted(request.exclusive) if await self._holds_queue(q, now, None)]
        scan = ClaimScan(request, now, busy)
        open_queues = scan.open_queues()
        if not open_queues:
            return []
        cursor = self._tasks.find(
            {
                "queue": {"$in": open_queues},
                "_ready": True,
                # implied by _ready_at; bounds the index scan of each priority value
                # of a queue at now, so the tasks not yet available are skipped
                "_avail": {"$lte": now},
                "_ready_at": {"$lte": now},
                "$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}],
            },
            NO_HISTORY,
            sort=[("_prio", 1), ("_avail", 1), ("_id", 1)],  # storekit.claim_order
        )
        cursor.batch_size(limit * 2 + 8)
        try:
            async for doc in cursor:
                if doc.get("queue") not in scan.open_queues():
                    continue  # closed meanwhile: not even decoded
                snapshot = self._decoded_or_none(doc, "claim_next")
                started = None if snapshot is None else scan.offer(snapshot)
                if started is not None:
                    await self._write_started(scan, doc, started)
                    if scan.done:
                        break
        finally:
            await settle(cursor.close())
            scan.report()  # the failures past their delivery limit, all written
        return scan.claims

    @operation
    async def next_available(self, queues: Sequence[str]) -> datetime | None:
        """The earliest available instant after the store's ``now`` of a task of
        ``queues`` that waits for it (see ``TaskStore.next_available``): the first
        document past ``now`` in the ``next_available`` index's order (by available
        instant, whatever the priority) that is pending, not expired and not under a live
        lease (a damaged one is skipped).

        Raises:
            InvalidInput: bad queue names.
            StoreUnavailable: transient failure.
        """
        wanted = sorted(rules.check_queues(queues))
        now = await self._now()
        cursor = self._tasks.find(
            {
                "queue": {"$in": wanted},
                "_ready": True,
                "_avail": {"$gt": now},
                "$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}],
                "$nor": [{"claim.ended": False, "claim.expires_at": {"$gt": now}}],
            },
            NO_HISTORY,
            sort=[("_avail", 1), ("_id", 1)],
        )
        cursor.batch_size(8)
        try:
            async for doc in cursor:
                snapshot = self._decoded_or_none(doc, "next_available")
                if snapshot is None:
                    continue
                available = rules.available_at(snapshot)
                if (available > now and not snapshot.expired(now)
                        and snapshot.status == TaskStatus.PENDING
                        and not snapshot.lease_live(now)):
                    return available
        finally:
            await settle(cursor.close())
        return None

    def _started_update(self, started: Started) -> dict[str, Any]:
        """The update writing a decided claim, or its failure past the delivery limit
        (the stored token kept)."""
        if started.failure is not None:
            return self._update(started.snapshot, record=started.failure)
        return self._update(started.snapshot, token=started.token)

    async def _write_started(
        self, scan: ClaimScan, doc: Mapping[str, Any], started: Started
    ) -> None:
        """Write a decision of ``scan`` over ``doc``: withdrawn if its compare-and-set is
        lost (or the write fails), its queue closed if found busy in the transaction."""
        queue = started.snapshot.queue
        try:
            if queue in scan.request.exclusive:
                outcome = await self._write_exclusive(doc, started, scan.now)
            elif await self._cas(doc, self._started_update(started)):
                outcome = _WON
            else:
                outcome = _LOST
        except BaseException:
            scan.withdraw(started)
            raise
        if outcome != _WON:
            scan.withdraw(started)
        if outcome == _BUSY:
            scan.close(queue)

    async def _holds_queue(self, queue: str, now: datetime, session: Any) -> bool:
        """Whether a task of ``queue`` keeps it busy: ``storekit.holds_queue`` as a query
        (a lease neither ended nor expired, whatever the task's status), served by the
        ``live_leases_by_queue`` index."""
        found = await self._tasks.find_one(
            {"queue": queue, "claim.ended": False, "claim.expires_at": {"$gt": now}},
            {"_id": 1},
            session=session,
        )
        return found is not None

    async def _write_exclusive(
        self, doc: Mapping[str, Any], started: Started, now: datetime
    ) -> str:
        """Write ``started`` only while no task of its queue holds a live lease, in one
        transaction that first writes the queue's document: two exclusive claimers of a
        queue always conflict, so one of them retries and sees the other's lease."""
        queue = started.snapshot.queue

        async def body(session: Any) -> str:
            await self._queues.update_one(
                {"_id": queue}, {"$inc": {"claims": 1}}, upsert=True, session=session
            )
            if await self._holds_queue(queue, now, session):
                return _BUSY
            won = await self._cas(doc, self._started_update(started), session=session)
            return _WON if won else _LOST

        if queue not in self._queue_docs:  # created outside the transaction, once
            await self._queues.update_one(
                {"_id": queue}, {"$setOnInsert": {"claims": 0}}, upsert=True
            )
            self._queue_docs.add(queue)
        outcome: str = await self._atomically(body)
        return outcome
