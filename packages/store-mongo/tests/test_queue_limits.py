"""Fleet-wide queue limits on MongoDB: the claims log in ``PREFIX.queue_claims`` (one
document per call, kept for the longest window asked for), racers on separate clients,
and a queue document dropped meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import ManualClock, TaskQuery, TaskStatus
from tasks_core.storekit import QueueLimits

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[Any]]
CLIENTS = 4
Q = "limited"


async def _limited(open_store: Opener, clock: ManualClock) -> Any:
    store = await open_store(clock=clock)
    if not store.capabilities.queue_limits:
        pytest.skip("queue limits need a replica set")
    return store


async def _create(store: Any, clock: ManualClock, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        ids.append((await store.create(new_task(queue=Q))).id)
        clock.advance(0.001)
    return ids


async def _log(store: Any) -> list[tuple[Any, int]]:
    cursor = store._queue_claims.find({"q": Q}, {"_id": 0}, sort=[("at", 1)])
    return [(doc["at"], doc["n"]) async for doc in cursor]


async def test_the_log_keeps_one_document_per_call_for_the_longest_window(
    open_store: Opener,
) -> None:
    """Each call that claims from a rate-limited queue MUST log one document of its
    claims at ``now``; a document MUST outlive a shorter window while a longer one was
    asked for, and go once no window asked for reaches it."""
    clock = ManualClock()
    store = await _limited(open_store, clock)
    await _create(store, clock, 4)
    indexes = await store._queue_claims.index_information()
    assert [("q", 1), ("at", 1)] == indexes["window"]["key"]
    first_at = await store.now()
    got = await store.claim_next("w1", 3600, queues=[Q], limit=2,
                                 limits={Q: QueueLimits(rate=(5, 60))})
    assert 2 == len(got)
    assert [(first_at, 2)] == await _log(store)
    assert 60_000 == (await store._queues.find_one({"_id": Q}))["kept_ms"]
    clock.advance(30)
    second_at = await store.now()
    short = {Q: QueueLimits(rate=(5, 10))}
    assert 2 == len(await store.claim_next("w1", 3600, queues=[Q], limit=5, limits=short))
    assert [(first_at, 2), (second_at, 2)] == await _log(store)
    clock.advance(31)
    assert [] == await store.claim_next("w1", LEASE_S, queues=[Q], limits=short)
    assert [(second_at, 2)] == await _log(store)
    assert first_at + timedelta(seconds=61) == await store.now()


async def test_limited_claims_on_separate_clients_stay_within_the_limits(
    open_store: Opener,
) -> None:
    """Claims of a queue with ``max_running=3`` and ``rate=(4, 60)`` through separate
    clients MUST hand out exactly 3 leases, on the 3 oldest tasks, and log 3 claims; once
    they end, one more (the rate's last)."""
    clock = ManualClock()
    stores = [await _limited(open_store, clock) for _ in range(CLIENTS)]
    ids = await _create(stores[0], clock, 10)
    limits = {Q: QueueLimits(max_running=3, rate=(4, 60))}
    results = await asyncio.gather(*(
        stores[n % CLIENTS].claim_next(f"w{n}", LEASE_S, queues=[Q], limit=2, limits=limits)
        for n in range(12)
    ))
    claims = [claim for batch in results for claim in batch]
    assert sorted(ids[:3]) == sorted(c.snapshot.id for c in claims)
    assert 3 == sum(n for _, n in await _log(stores[0]))
    for claim in claims:
        await stores[1].release(claim.lease)
    again = await asyncio.gather(*(
        stores[n % CLIENTS].claim_next(f"w{n}", LEASE_S, queues=[Q], limit=2, limits=limits)
        for n in range(8)
    ))
    assert 1 == sum(len(batch) for batch in again)
    running = await stores[2].list(
        TaskQuery(tenant=None, statuses=frozenset({TaskStatus.RUNNING, TaskStatus.CLAIMED}),
                  queue=Q))
    assert 1 == len(running)


async def test_a_queue_document_dropped_meanwhile_is_made_again(open_store: Opener) -> None:
    """A limited queue whose document was dropped under a running store MUST claim
    nothing in the call that finds it missing (it cannot be guarded), then be created
    again and claimed from by the next call."""
    clock = ManualClock()
    store = await _limited(open_store, clock)
    ids = await _create(store, clock, 2)
    limits = {Q: QueueLimits(max_running=2)}
    assert [ids[0]] == [c.snapshot.id for c in
                        await store.claim_next("w1", LEASE_S, queues=[Q], limits=limits)]
    await store._queues.delete_one({"_id": Q})
    assert [] == await store.claim_next("w1", LEASE_S, queues=[Q], limits=limits)
    assert [ids[1]] == [c.snapshot.id for c in
                        await store.claim_next("w1", LEASE_S, queues=[Q], limits=limits)]
