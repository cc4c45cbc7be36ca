"""Exclusive queues and queue limits on a standalone server (no transactions): claimers in
separate threads, each with its own event loop, client and store, race for a limited
queue; the queue's document, a compare-and-set of the claims in flight
(``_alone_limits``), lets exactly the limit through.

The race is proven by a broken store that counts the queue's live leases and then claims
(it checks, then acts): the same race check MUST fail against it.
"""

from __future__ import annotations

import secrets
import shutil
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from mongo_server import secantusd, store_url
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import Claim, Completed
from tasks_core.storekit import ClaimRequest, ClaimScan, QueueLimits
from tasks_store_mongo import MongoStore, _alone_limits
from tasks_store_mongo.plugin import open_mongo
from thread_race import race_in_threads

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        shutil.which(secantusd()) is None and not Path(secantusd()).exists(),
        reason="secantusd-py is not installed",
    ),
]

THREADS = 6
ROUNDS = 4
QUEUE = "serial"


class CountThenClaim(MongoStore):
    """Broken: counts the queue's live leases, then claims within that room — no
    reservation on the queue's document, so the check and the act are writes apart."""

    async def _claim_limited_alone(self, request: ClaimRequest) -> list[Claim]:
        await self._ensure_queue_docs(sorted(request.limited))
        held = await _alone_limits.read(self._queues, request)
        now = await self._now()
        running, recent = await _alone_limits.count(self._tasks, request, held, now)
        scan = ClaimScan(request, now, held.missing, running=running, recent=recent)
        await self._scan(scan, None)
        return scan.claims


async def _race_rounds(
    cls: type[MongoStore], base: str, driver: str, limits: QueueLimits
) -> list[int]:
    """``ROUNDS`` races of ``THREADS`` claimers for the queue (plenty of tasks in it);
    after each, the claims are completed. The number of claims of each round."""
    namespace = "q" + secrets.token_hex(5)
    store = await open_mongo(store_url(base, driver), namespace=namespace)
    try:
        for _ in range(THREADS * ROUNDS):
            await store.create(new_task(queue=QUEUE))
        counts = []
        for _ in range(ROUNDS):
            claims: list[Claim] = []

            async def claim(racer: MongoStore, claims: list[Claim] = claims) -> None:
                claims.extend(await racer.claim_next(
                    f"w-{threading.get_ident()}", LEASE_S, queues=[QUEUE],
                    limits={QUEUE: limits}))

            race_in_threads(THREADS, cls, base, driver, namespace, claim)
            counts.append(len(claims))
            assert len({c.snapshot.id for c in claims}) == len(claims)  # never one twice
            for made in claims:
                await store.transition(made.snapshot.id, made.snapshot.revision,
                                       Completed(event_id="done", result=None), made.lease)
        return counts
    finally:
        await store.aclose()


@pytest.mark.parametrize("running", [1, 2])
async def test_racing_limited_claimers_in_threads_take_exactly_the_room(
    standalone: str, driver: str, running: int
) -> None:
    """Claimers of a queue limited to ``running`` live leases (1: exclusive) racing from
    separate threads on a standalone server MUST claim exactly ``running`` tasks, round
    after round (the previous round's completed)."""
    counts = await _race_rounds(MongoStore, standalone, driver,
                                QueueLimits(max_running=running))
    assert [running] * ROUNDS == counts


async def test_the_race_catches_a_store_that_counts_then_claims(
    standalone: str, driver: str
) -> None:
    """The exclusive race above MUST fail against a store that counts the queue's live
    leases and then claims, reserving nothing."""
    counts = await _race_rounds(CountThenClaim, standalone, driver,
                                QueueLimits(max_running=1))
    with pytest.raises(AssertionError):
        assert [1] * ROUNDS == counts


async def test_a_rate_counts_claims_across_stores(standalone: str, driver: str) -> None:
    """``rate=(2, 3600)`` MUST allow two claims of the queue across two stores, then none,
    even after those two finished."""
    namespace = "q" + secrets.token_hex(5)
    url = store_url(standalone, driver)
    first = await open_mongo(url, namespace=namespace)
    second = await open_mongo(url, namespace=namespace)
    try:
        for _ in range(4):
            await first.create(new_task(queue=QUEUE))
        limits = {QUEUE: QueueLimits(rate=(2, 3600))}
        one = await first.claim_next("w1", LEASE_S, queues=[QUEUE], limits=limits)
        two = await second.claim_next("w2", LEASE_S, queues=[QUEUE], limits=limits, limit=5)
        assert (1, 1) == (len(one), len(two))
        for claim in (*one, *two):
            await first.transition(claim.snapshot.id, claim.snapshot.revision,
                                   Completed(event_id="done", result=None), claim.lease)
        assert [] == await second.claim_next("w2", LEASE_S, queues=[QUEUE], limits=limits)
    finally:
        await second.aclose()
        await first.aclose()


class _LandsAfterFirstRead:
    """The store's tasks collection, but the first read of it made through this proxy
    is followed at once by ``land()``: another claimer's write landing mid-count."""

    def __init__(self, tasks: Any, land: Callable[[], Awaitable[object]]) -> None:
        self._tasks = tasks
        self._land: Callable[[], Awaitable[object]] | None = land

    async def _landed(self) -> None:
        if self._land is not None:
            land, self._land = self._land, None
            await land()

    def find(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async def read_then_land() -> AsyncIterator[Any]:
            docs = [doc async for doc in self._tasks.find(*args, **kwargs)]
            await self._landed()
            for doc in docs:
                yield doc
        return read_then_land()

    async def count_documents(self, *args: Any, **kwargs: Any) -> int:
        counted = int(await self._tasks.count_documents(*args, **kwargs))
        await self._landed()
        return counted


async def test_a_claim_landing_during_the_count_is_counted_once(
    standalone: str, driver: str
) -> None:
    """A claim another claimer reserved (a held entry) and writes while this claimer
    counts MUST count once toward ``max_running`` — as pending before its write, as a live
    lease after it — never twice (which would leave room the limit allows unused)."""
    store = await open_mongo(store_url(standalone, driver), namespace="q" + secrets.token_hex(5))
    try:
        task = await store.create(new_task(queue=QUEUE))
        request = ClaimRequest(worker_id="w", lease_for=LEASE_S, queues=frozenset({QUEUE}),
                               limits={QUEUE: QueueLimits(max_running=2)}, limit=1)
        now = await store._now()
        held = _alone_limits.Held(entries={QUEUE: [
            {"r": "other", "t": task.id, "g": task.lease_generation + 1,
             "at": now, "until": now + timedelta(seconds=LEASE_S)}]})

        async def land() -> None:
            assert 1 == len(await store.claim_next("other", LEASE_S, queues=[QUEUE]))

        running, _ = await _alone_limits.count(
            _LandsAfterFirstRead(store._tasks, land), request, held, now)
        assert {QUEUE: 1} == running
    finally:
        await store.aclose()
