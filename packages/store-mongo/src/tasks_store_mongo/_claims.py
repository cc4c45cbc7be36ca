"""Claims (private): ``claim``, ``claim_next`` (limited queues included) and
``next_available``.

The decisions are :mod:`tasks_core.storekit`'s; this module fetches and writes, each
claim a compare-and-set on the task document. ``claim_next`` streams candidates from the
``claim_next`` index in claim order (``storekit.claim_order``), offers each to a
``storekit.ClaimScan`` and writes its decision by compare-and-set; a candidate lost to
another writer is withdrawn and skipped, never waited for. A call with limited queues
(``limits``; ``exclusive``: ``max_running=1``) runs in one transaction that first writes
each limited queue's document, then counts and logs within its room
(:mod:`._queue_limits`); on a standalone server the queue's document is a
compare-and-set of the claims in flight instead (:mod:`._alone_limits`).
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from tasks_core import rules, storekit
from tasks_core.errors import TaskNotFound
from tasks_core.models import Claim, TaskStatus
from tasks_core.storekit import ClaimRequest, ClaimScan, QueueLimits, Started

from tasks_store_mongo import _alone_limits, _codec
from tasks_store_mongo._base import CAS_ATTEMPTS, NO_HISTORY, MongoBase, operation
from tasks_store_mongo._driver import settle
from tasks_store_mongo._queue_limits import QueueCounts, count_queues, log_claims, take_queues

__all__ = ["MongoClaims"]


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
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> builtins.list[Claim]:
        """Claim up to ``limit`` claimable tasks, the first in claim order (see
        ``TaskStore.claim_next``); a queue of ``limits`` (or ``exclusive``) within its
        room.

        Candidates stream in claim order from the ``claim_next`` index; each decision of
        the scan is written by compare-and-set, and one lost to another writer is
        withdrawn and skipped, never waited for. With limited queues all of it runs in
        one transaction that takes, counts and logs them first (:mod:`._queue_limits`).

        Raises:
            InvalidInput: bad arguments.
            StoreUnavailable: transient failure.
        """
        request = storekit.check_claim_next(worker_id, lease_for, queues, limit, exclusive,
                                            start, limits)
        if request.limited and not self._transactions:
            return await self._claim_limited_alone(request)
        if request.limited:
            return await self._claim_limited(request)
        scan = ClaimScan(request, await self._now())
        try:
            await self._scan(scan, None)
        finally:
            scan.report()  # the failures past their delivery limit, all written
        return scan.claims

    async def _claim_limited(self, request: ClaimRequest) -> builtins.list[Claim]:
        """``claim_next`` of a request with limited queues, in one transaction: the
        queues taken (:func:`._queue_limits.take_queues`), then the clock, the counts,
        the scan and the claims log."""
        await self._ensure_queue_docs(sorted(request.limited))

        async def body(session: Any) -> ClaimScan:
            counts = QueueCounts()
            await take_queues(self._queues, request, counts, session)
            now = await self._now()  # once the queues are taken
            await count_queues(self._tasks, self._queue_claims, request, counts, now,
                               session)
            scan = ClaimScan(request, now, counts.missing, running=counts.running,
                             recent=counts.recent)
            await self._scan(scan, session)
            await log_claims(self._queue_claims, scan, counts, session)
            self._queue_docs.difference_update(counts.missing)
            return scan

        scan: ClaimScan = await self._atomically(body)
        scan.report()  # committed
        return scan.claims

    async def _claim_limited_alone(self, request: ClaimRequest) -> builtins.list[Claim]:
        """``claim_next`` of a request with limited queues on a standalone server: read
        the queues' documents, count, decide, reserve on their versions, then write
        (:mod:`._alone_limits`); a queue changed since the read starts it again."""
        await self._ensure_queue_docs(sorted(request.limited))
        for attempt in range(CAS_ATTEMPTS):
            held = await _alone_limits.read(self._queues, request)
            now = await self._now()
            running, recent = await _alone_limits.count(self._tasks, request, held, now)
            scan = ClaimScan(request, now, held.missing, running=running, recent=recent)
            decided: builtins.list[tuple[Mapping[str, Any], Started]] = []
            await self._scan(scan, None, decided, skip=_alone_limits.in_flight(held, now))
            if not await _alone_limits.reserve(self._queues, request, held, decided, now):
                await self._contended(attempt)
                continue
            try:
                for doc, started in decided:
                    await self._write_started(scan, doc, started, None)
            finally:
                await _alone_limits.settle(self._queues, request, held, scan, decided)
            scan.report()
            return scan.claims
        raise AssertionError("unreachable")  # pragma: no cover

    async def _ensure_queue_docs(self, queues: builtins.list[str]) -> None:
        """Create the documents of limited queues seen for the first time, outside any
        transaction (an existing one is never written here)."""
        for queue in queues:
            if queue not in self._queue_docs:
                await self._queues.update_one(
                    {"_id": queue}, {"$setOnInsert": {"claims": 0}}, upsert=True
                )
                self._queue_docs.add(queue)

    async def _scan(
        self, scan: ClaimScan, session: Any,
        decided: builtins.list[tuple[Mapping[str, Any], Started]] | None = None,
        skip: frozenset[str] = frozenset(),
    ) -> None:
        """Offer the candidates of the open queues of ``scan`` in claim order and write
        its decisions (in ``session``, if any) until it is done or they run out; with
        ``decided``, collect them there unwritten instead; ``skip``: task ids another
        claimer reserved (not offered)."""
        open_queues = scan.open_queues()
        if not open_queues:
            return
        now = scan.now
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
            session=session,
        )
        cursor.batch_size(scan.request.limit * 2 + 8)
        try:
            async for doc in cursor:
                if doc.get("queue") not in scan.open_queues() or doc.get("_id") in skip:
                    continue  # closed meanwhile, or reserved by another: not decoded
                snapshot = self._decoded_or_none(doc, "claim_next")
                started = None if snapshot is None else scan.offer(snapshot)
                if started is not None and decided is not None:
                    decided.append((doc, started))
                elif started is not None:
                    await self._write_started(scan, doc, started, session)
                    if scan.done:
                        break
        finally:
            await settle(cursor.close())

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
        self, scan: ClaimScan, doc: Mapping[str, Any], started: Started, session: Any
    ) -> None:
        """Write a decision of ``scan`` over ``doc`` by compare-and-set (in ``session``,
        if any): withdrawn if it is lost (or the write fails)."""
        try:
            won = await self._cas(doc, self._started_update(started), session=session)
        except BaseException:
            scan.withdraw(started)
            raise
        if not won:
            scan.withdraw(started)
