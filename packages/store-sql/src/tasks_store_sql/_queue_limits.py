"""Fleet-wide queue limits on the SQL path (capability ``queue_limits``): what
``claim_next`` reads and writes for its limited queues inside its own transaction.

Each limited queue's lock row ``queue:<name>`` is locked (in name order; SQLite's ``BEGIN
IMMEDIATE`` serializes writers instead): claimers of one limited queue take turns, one
claim transaction each, so none finds room taken by a claim that is not yet committed
nor leaves room it could claim. Under it the claim counts the queue's live leases
(``ix_tasks_lease``, at most ``max_running``) and its claims after ``now - window`` in
``queue_claims`` (at most the rate's count), and logs one row per claim of a rate-limited
queue at ``now``. The lock row's ``value`` is the longest window (ms) any claimer asked
for; rows older than ``now`` less that are deleted, so workers that disagree on a
queue's window never delete a row a longer window still counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core.storekit import ClaimRequest, ClaimScan

from tasks_store_sql._schema import Tables

__all__ = ["QueueCounts", "count_queues", "log_claims", "queue_lock"]

_MS = timedelta(milliseconds=1)


def queue_lock(queue: str) -> str:
    """The name of ``queue``'s lock row."""
    return f"queue:{queue}"


@dataclass
class QueueCounts:
    """What the claim read for its limited queues: ``busy`` (held by another claimer),
    ``running`` (live leases) and ``recent`` (claims in the window) of the others, and
    ``kept``, the longest window of each rate-limited one (what the log keeps)."""

    busy: list[str] = field(default_factory=list)
    running: dict[str, int] = field(default_factory=dict)
    recent: dict[str, int] = field(default_factory=dict)
    kept: dict[str, timedelta] = field(default_factory=dict)


async def count_queues(
    conn: AsyncConnection, tables: Tables, request: ClaimRequest, *, lock: bool
) -> QueueCounts:
    """Lock the lock rows of the limited queues of ``request`` (``lock``: ``FOR UPDATE``,
    waiting for the claimer that holds one; a row missing counts its queue busy) and raise
    each one's kept window to the call's. Call before reading the clock, so that ``now``
    is read under the locks (:func:`count_at` counts at it)."""
    locks = tables.locks
    names = {queue_lock(q): q for q in sorted(request.limited)}
    stmt = (sa.select(locks.c.name, locks.c.value)
            .where(locks.c.name.in_(list(names)))
            .order_by(locks.c.name))
    if lock:
        stmt = stmt.with_for_update()
    found = {names[name]: value for name, value in (await conn.execute(stmt)).all()}
    counts = QueueCounts(busy=sorted(q for q in names.values() if q not in found))
    for queue, stored in sorted(found.items()):
        window = request.limits[queue].window
        if window is None:
            continue
        wanted = window // _MS
        counts.kept[queue] = max(window, int(stored) * _MS)
        if wanted > stored:  # longer than any window before: kept from now on
            await conn.execute(
                sa.update(locks)
                .where(locks.c.name == queue_lock(queue), locks.c.value < wanted)
                .values(value=wanted))
    return counts


async def count_at(
    conn: AsyncConnection, tables: Tables, request: ClaimRequest, counts: QueueCounts,
    now: datetime,
) -> None:
    """Fill ``counts.running`` and ``counts.recent`` at ``now`` for the queues taken, each
    count stopping at the limit it is compared with."""
    t, log = tables.tasks, tables.claims
    for queue, limits in sorted(request.limits.items()):
        if queue in counts.busy:
            continue
        if limits.max_running is not None:
            live = (sa.select(t.c.id)
                    .where(t.c.queue == queue, t.c.claim_expires_at > now)
                    .limit(limits.max_running)
                    .subquery())
            counts.running[queue] = int((await conn.execute(
                sa.select(sa.func.count()).select_from(live))).scalar_one())
        start = limits.window_start(now)
        if limits.rate is not None and start is not None:
            made = (sa.select(log.c.queue)
                    .where(log.c.queue == queue, log.c.claimed_at > start)
                    .limit(limits.rate[0])
                    .subquery())
            counts.recent[queue] = int((await conn.execute(
                sa.select(sa.func.count()).select_from(made))).scalar_one())


async def log_claims(
    conn: AsyncConnection, tables: Tables, scan: ClaimScan, counts: QueueCounts
) -> None:
    """Log the claims ``scan`` decided of each rate-limited queue taken (one row each, at
    ``scan.now``) and delete the rows its kept window no longer reaches."""
    log = tables.claims
    for queue, kept in sorted(counts.kept.items()):
        claimed = scan.claimed(queue)
        if claimed:
            await conn.execute(sa.insert(log), [{"queue": queue, "claimed_at": scan.now}
                                                for _ in range(claimed)])
        await conn.execute(sa.delete(log).where(log.c.queue == queue,
                                                log.c.claimed_at <= scan.now - kept))
