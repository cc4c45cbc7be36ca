"""Fleet-wide queue limits (private; capability ``queue_limits``): what ``claim_next``
reads and writes for its limited queues inside its transaction.

First each limited queue's document in ``PREFIX.queues`` is written (name order): two
claim transactions of one queue always conflict, so one retries and sees the other's
claims. Then, at ``now`` read after those writes, the queue's live leases are counted
(``live_leases_by_queue``, at most ``max_running``) and its claims after ``now - window``
in ``PREFIX.queue_claims`` (``{q, at, n}``: ``n`` claims at ``at``; at most the rate's
count). The claims of a rate-limited queue are logged as one document at ``now``; its
queue document keeps ``kept_ms``, the longest window any claimer asked for (only raised),
and log documents that window no longer reaches are deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pymongo import ReturnDocument
from tasks_core.storekit import ClaimRequest, ClaimScan

__all__ = ["QueueCounts", "count_queues", "log_claims", "take_queues"]

_MS = timedelta(milliseconds=1)


@dataclass
class QueueCounts:
    """What the claim read for its limited queues: ``missing``, those without a document
    (full for this call); ``running`` (live leases) and ``recent`` (claims in the window)
    of the others, and ``kept``, the longest window of each rate-limited one (how far back
    its log is kept)."""

    missing: list[str] = field(default_factory=list)
    running: dict[str, int] = field(default_factory=dict)
    recent: dict[str, int] = field(default_factory=dict)
    kept: dict[str, timedelta] = field(default_factory=dict)


def _ms(window: timedelta) -> int:
    """``window`` in whole milliseconds, rounded up (a stored window never falls short)."""
    return -(-window // _MS)


async def take_queues(
    queues: Any, request: ClaimRequest, counts: QueueCounts, session: Any
) -> None:
    """Write the document of each limited queue of ``request`` in ``session`` (name
    order), raising its kept window to the call's, into ``counts.kept``. The documents
    are created beforehand, outside any transaction (two upserts racing in transactions
    would be a duplicate key, not a conflict); one missing (dropped meanwhile) leaves its
    queue in ``counts.missing``, which the call treats as full. Call before reading the
    clock, so that ``now`` is read once the queues are taken."""
    for queue in sorted(request.limited):
        window = request.limits[queue].window
        update: dict[str, Any] = {"$inc": {"claims": 1}}
        if window is not None:
            update["$max"] = {"kept_ms": _ms(window)}
        doc = await queues.find_one_and_update(
            {"_id": queue}, update, {"kept_ms": 1},
            return_document=ReturnDocument.AFTER, session=session,
        )
        if doc is None:
            counts.missing.append(queue)
        elif window is not None:
            stored = doc.get("kept_ms")
            counts.kept[queue] = (max(window, int(stored) * _MS)
                                  if isinstance(stored, int) else window)


async def count_queues(
    tasks: Any, claims: Any, request: ClaimRequest, counts: QueueCounts, now: datetime,
    session: Any,
) -> None:
    """Fill ``counts.running`` and ``counts.recent`` at ``now`` for the queues taken, each
    count stopping at the limit it is compared with (``storekit.holds_queue`` as a query:
    a lease neither ended nor expired, whatever the task's status)."""
    for queue, limits in sorted(request.limits.items()):
        if queue in counts.missing:
            continue
        if limits.max_running is not None:
            counts.running[queue] = int(await tasks.count_documents(
                {"queue": queue, "claim.ended": False, "claim.expires_at": {"$gt": now}},
                limit=limits.max_running, session=session,
            ))
        start = limits.window_start(now)
        if limits.rate is not None and start is not None:
            made = 0
            cursor = claims.find({"q": queue, "at": {"$gt": start}}, {"_id": 0, "n": 1},
                                 limit=limits.rate[0], session=session)
            async for doc in cursor:  # each logs at least one claim: enough to compare
                made += max(1, int(doc.get("n", 1)))
            counts.recent[queue] = made


async def log_claims(
    claims: Any, scan: ClaimScan, counts: QueueCounts, session: Any
) -> None:
    """Log the claims ``scan`` decided of each rate-limited queue taken (one document at
    ``scan.now``) and delete the log its kept window no longer reaches."""
    for queue, window in sorted(counts.kept.items()):
        claimed = scan.claimed(queue)
        if claimed:
            await claims.insert_one({"q": queue, "at": scan.now, "n": claimed},
                                    session=session)
        await claims.delete_many({"q": queue, "at": {"$lte": scan.now - window}},
                                 session=session)
