"""Queue limits on a standalone server (private): ``claim_next(exclusive=…, limits=…)``
without multi-document transactions.

Each limited queue's document in ``PREFIX.queues`` serializes its limited claimers:
``{_id: q, claims: <version>, kept_ms, held: [{r, t, g, at, until}]}``, ``held`` the
claims decided but maybe not yet written (and, for a rate, those within its window). A
claim reads the versions and the clock (1, :func:`read`), counts ``running`` (live
leases and pending held entries, one read) and ``recent`` (2, :func:`count`),
decides without writing (3), reserves by one update conditional on the version read (4,
:func:`reserve`) and writes by compare-and-set (5, :func:`settle`). Rule: a limit is
never exceeded, only reached early (a dead claimer's entries count until their lease
end). docs/mongodb.md, "Queue limits on a standalone server", says why each step holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tasks_core.storekit import ClaimRequest, ClaimScan, Started

from tasks_store_mongo import _codec

__all__ = ["Held", "count", "in_flight", "read", "reserve", "settle"]

_MS = timedelta(milliseconds=1)
Decided = Sequence[tuple[Mapping[str, Any], Started]]


@dataclass
class Held:
    """What one limited claim read of its queues' documents (see the module docstring)."""

    versions: dict[str, Any] = field(default_factory=dict)
    kept: dict[str, timedelta] = field(default_factory=dict)
    entries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    reservation: str = field(default_factory=_codec.new_tag)


async def read(queues: Any, request: ClaimRequest) -> Held:
    """Step 1: each limited queue's version, kept window and held entries."""
    held = Held()
    for queue in sorted(request.limited):
        doc = await queues.find_one({"_id": queue})
        if doc is None:
            held.missing.append(queue)
            continue
        held.versions[queue] = doc.get("claims", 0)
        stored = doc.get("kept_ms")
        held.kept[queue] = int(stored) * _MS if isinstance(stored, int) else timedelta(0)
        entries = doc.get("held")
        held.entries[queue] = [e for e in entries if isinstance(e, dict)] if isinstance(
            entries, list) else []
    return held


async def count(
    tasks: Any, request: ClaimRequest, held: Held, now: datetime
) -> tuple[dict[str, int], dict[str, int]]:
    """Step 2: ``running`` and ``recent`` of each limited queue at ``now``."""
    running: dict[str, int] = {}
    recent: dict[str, int] = {}
    for queue, limits in sorted(request.limits.items()):
        if queue in held.missing:
            continue
        entries = held.entries[queue]
        if limits.max_running is not None:
            running[queue] = await _running(tasks, queue, entries, now)
        start = limits.window_start(now)
        if limits.rate is not None and start is not None:
            recent[queue] = sum(1 for e in entries if _at(e, "at") > start)
    return running, recent


def _at(entry: Mapping[str, Any], key: str) -> datetime:
    value = entry.get(key)
    return value if isinstance(value, datetime) else datetime.min.replace(tzinfo=UTC)


async def _running(tasks: Any, queue: str, entries: list[dict[str, Any]],
                   now: datetime) -> int:
    """The tasks of ``queue`` holding a live lease or about to (a held entry whose lease
    end has not passed, the task's stored lease generation still below the entry's), by
    one read of the tasks: a claim is one document's write, so a claim landing while
    the count reads is counted once — pending before it, live after it."""
    pending: dict[str, int] = {}
    for entry in entries:
        if _at(entry, "until") > now:
            task_id = str(entry.get("t"))
            pending[task_id] = max(pending.get(task_id, 0), int(entry.get("g", 0)))
    live = {"queue": queue, "claim.ended": False, "claim.expires_at": {"$gt": now}}
    query = {"$or": [live, {"_id": {"$in": sorted(pending)}}]} if pending else live
    running = 0
    async for doc in tasks.find(query, {"queue": 1, "claim": 1, "lease_generation": 1}):
        claim = doc.get("claim")
        generation = doc.get("lease_generation")
        live_lease = (doc.get("queue") == queue and isinstance(claim, dict)
                      and claim.get("ended") is False and _at(claim, "expires_at") > now)
        landing = doc["_id"] in pending and (
            generation if isinstance(generation, int) else 0) < pending[doc["_id"]]
        running += live_lease or landing
    return running


def in_flight(held: Held, now: datetime) -> frozenset[str]:
    """The tasks other claimers reserved and may still be writing (lease end not passed):
    the scan skips them, so two limited claimers never decide on one task — the loser of
    that write would leave room unused."""
    return frozenset(str(e.get("t")) for entries in held.entries.values()
                     for e in entries if _at(e, "until") > now)


async def reserve(
    queues: Any, request: ClaimRequest, held: Held, decided: Decided, now: datetime
) -> bool:
    """Step 4: push the decided claims of each limited queue into its ``held``, each
    conditional on the version read; ``False`` (every reservation taken back) when a
    queue changed since."""
    done: list[str] = []
    for queue in sorted(held.versions):
        entries = [
            {"r": held.reservation, "t": started.snapshot.id,
             "g": started.snapshot.lease_generation, "at": now,
             "until": started.claim.lease.expires_at}
            for _, started in decided
            if started.claim is not None and started.snapshot.queue == queue
        ]
        if not entries:
            continue
        update: dict[str, Any] = {"$inc": {"claims": 1},
                                  "$push": {"held": {"$each": entries}}}
        window = request.limits[queue].window
        if window is not None:
            update["$max"] = {"kept_ms": -(-window // _MS)}
        taken = await queues.update_one(
            {"_id": queue, "claims": held.versions[queue]}, update
        )
        if taken.matched_count != 1:
            await _take_back(queues, held, done)
            return False
        done.append(queue)
    return True


async def _take_back(queues: Any, held: Held, names: list[str]) -> None:
    for queue in names:
        await queues.update_one({"_id": queue},
                                {"$pull": {"held": {"r": held.reservation}}})


async def settle(
    queues: Any, request: ClaimRequest, held: Held, scan: ClaimScan, decided: Decided
) -> None:
    """Step 5, once the claims are written: pull the entries of claims withdrawn (or
    not written), and of every claim of a queue without a rate; prune entries neither
    pending nor in any window."""
    made = {(claim.snapshot.id, claim.snapshot.lease_generation) for claim in scan.claims}
    for queue in sorted(held.versions):
        rated = request.limits[queue].rate is not None
        lost = [started.snapshot.id for _, started in decided
                if started.claim is not None and started.snapshot.queue == queue
                and (not rated or (started.snapshot.id, started.snapshot.lease_generation)
                     not in made)]
        if lost:
            await queues.update_one(
                {"_id": queue},
                {"$pull": {"held": {"r": held.reservation, "t": {"$in": lost}}}},
            )
        cutoff = scan.now - max(held.kept[queue], request.limits[queue].window or timedelta(0))
        await queues.update_one(
            {"_id": queue},
            {"$pull": {"held": {"until": {"$lte": scan.now}, "at": {"$lte": cutoff}}}},
        )

