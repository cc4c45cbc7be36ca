"""Claims (private): ``claim`` and ``claim_next``, exclusive queues included.

A claim is a compare-and-set on the task document like every other write (see
``_base``). ``claim_next`` streams candidates from the ``claim_next`` index in
(created_at, id) order and claims each by compare-and-set; a candidate lost to another
claimer is skipped, never waited for. An exclusive queue is claimed inside a transaction
that first writes the queue's own document, so exclusive claimers of one queue always
conflict and serialize.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from tasks_core import reports, rules
from tasks_core.errors import CapabilityNotSupported, TaskNotFound, Unavailable
from tasks_core.events import EventRecord
from tasks_core.models import Claim, Snapshot

from tasks_store_mongo import _codec
from tasks_store_mongo._base import CAS_ATTEMPTS, NO_HISTORY, MongoBase, operation
from tasks_store_mongo._driver import settle

__all__ = ["MongoClaims"]

_LOST = "lost"  # a compare-and-set lost to another writer
_BUSY = "busy"  # an exclusive queue already has a live lease


class MongoClaims(MongoBase):
    """``claim`` and ``claim_next``."""

    # -- claims --------------------------------------------------------------------------

    @operation
    async def claim(self, task_id: str, worker_id: str, lease_for: float) -> Claim:
        """Claim exactly ``task_id`` (see ``TaskStore.claim``).

        Raises:
            TaskNotFound, Unavailable, Deferred, InvalidInput, StoreCorrupt,
            StoreUnavailable.
        """
        rules.check_lease_for(lease_for)
        rules.check_worker_id(worker_id)
        for attempt in range(CAS_ATTEMPTS):
            doc = await self._load(task_id)
            if doc is None:
                raise TaskNotFound(task_id)
            now = await self._now()
            snapshot = _codec.decode_task(task_id, doc)
            rules.check_claimable(snapshot, now)
            outcome = await self._start(doc, snapshot, worker_id, lease_for, now)
            if isinstance(outcome, Claim):
                return outcome
            if outcome is None:
                raise Unavailable(
                    f"The task exceeded {snapshot.work.max_deliveries} deliveries"
                )
            await self._contended(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _start(
        self,
        doc: dict[str, Any],
        snapshot: Snapshot,
        worker_id: str,
        lease_for: float,
        now: datetime,
        session: Any = None,
        failed: list[EventRecord] | None = None,
    ) -> Claim | str | None:
        """Claim a claimable task: the claim, ``None`` if it was failed for exceeding its
        delivery limit instead (in a ``session``: its record added to ``failed``, for the
        caller to report once the transaction commits), or ``_LOST``."""
        new, token, lease, failure = rules.start_claim(snapshot, worker_id, lease_for, now)
        if failure is not None:
            won = await self._cas(doc, self._update(new, record=failure), session=session)
            if won and session is None:
                reports.delivery_limit(snapshot.id, failure)
            elif won and failed is not None:
                failed.append(failure)
            return None if won else _LOST
        assert lease is not None
        if not await self._cas(doc, self._update(new, token=token), session=session):
            return _LOST
        return Claim(rules.present(new, now), lease)

    @operation
    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
    ) -> builtins.list[Claim]:
        """Claim up to ``limit`` oldest claimable tasks (see ``TaskStore.claim_next``).

        Candidates stream in (created_at, id) order from the ``claim_next`` index; each is
        claimed by compare-and-set, and one lost to another claimer is skipped, never
        waited for.

        Raises:
            CapabilityNotSupported: ``exclusive`` on a deployment without transactions.
            InvalidInput: bad arguments.
            StoreUnavailable: transient failure.
        """
        rules.check_lease_for(lease_for)
        rules.check_worker_id(worker_id)
        wanted = rules.check_queues(queues)
        exclusive_set = rules.check_queues(exclusive, allow_empty=True)
        rules.check_limit(limit, maximum=rules.MAX_BATCH)
        if exclusive_set and not self.capabilities.exclusive_queues:
            raise CapabilityNotSupported(
                "exclusive queues need a MongoDB replica set (multi-document transactions)"
            )
        now = await self._now()
        busy = {q for q in exclusive_set & wanted if await self._has_live_lease(q, now, None)}
        claims: builtins.list[Claim] = []
        open_queues = sorted(wanted - busy)
        if not open_queues:
            return claims
        cursor = self._tasks.find(
            {
                "queue": {"$in": open_queues},
                "_ready": True,
                "_ready_at": {"$lte": now},
                "$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}],
            },
            NO_HISTORY,
            sort=[("created_at", 1), ("_id", 1)],
        )
        cursor.batch_size(limit * 2 + 8)
        try:
            async for doc in cursor:
                queue = doc.get("queue")
                if queue in busy:
                    continue
                snapshot = self._decoded_or_none(doc, "claim_next")
                if snapshot is None or not rules.is_claimable(snapshot, now):
                    continue
                if queue in exclusive_set:
                    outcome = await self._claim_exclusive(snapshot, worker_id, lease_for, now)
                else:
                    outcome = await self._start(doc, snapshot, worker_id, lease_for, now)
                if isinstance(outcome, Claim):
                    claims.append(outcome)
                    if queue in exclusive_set:
                        busy.add(snapshot.queue)
                    if len(claims) >= limit:
                        break
                elif outcome == _BUSY:
                    busy.add(snapshot.queue)
        finally:
            await settle(cursor.close())
        return claims

    async def _has_live_lease(self, queue: str, now: datetime, session: Any) -> bool:
        found = await self._tasks.find_one(
            {"queue": queue, "claim.ended": False, "claim.expires_at": {"$gt": now}},
            {"_id": 1},
            session=session,
        )
        return found is not None

    async def _claim_exclusive(
        self, candidate: Snapshot, worker_id: str, lease_for: float, now: datetime
    ) -> Claim | str | None:
        """Claim ``candidate`` only while no task of its queue holds a live lease, in one
        transaction that first writes the queue's document: two exclusive claimers of a
        queue always conflict, so one of them retries and sees the other's lease."""
        queue = candidate.queue

        async def body(session: Any) -> Claim | str | None:
            await self._queues.update_one(
                {"_id": queue}, {"$inc": {"claims": 1}}, upsert=True, session=session
            )
            if await self._has_live_lease(queue, now, session):
                return _BUSY
            doc = await self._load(candidate.id, session=session)
            if doc is None:
                return _LOST
            snapshot = _codec.decode_task(candidate.id, doc)
            if not rules.is_claimable(snapshot, now):
                return _LOST
            failed.clear()
            return await self._start(doc, snapshot, worker_id, lease_for, now, session, failed)

        failed: list[EventRecord] = []  # past its delivery limit: failed instead
        if queue not in self._queue_docs:  # created outside the transaction, once
            await self._queues.update_one(
                {"_id": queue}, {"$setOnInsert": {"claims": 0}}, upsert=True
            )
            self._queue_docs.add(queue)
        outcome: Claim | str | None = await self._atomically(body)
        if outcome is None and failed:  # committed: the failure is written
            reports.delivery_limit(candidate.id, failed[0])
        return outcome


