"""The claim log of rate-limited queues (``queue_claims``): one row per claim at the
store clock, kept for the longest window any claimer asked for (the queue's lock row
``value``, in milliseconds) — so a worker with a shorter window never deletes the rows
another worker's longer window still counts — and deleted past it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest
import sqlalchemy as sa
from conftest import Opener
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import ManualClock
from tasks_core.storekit import QueueLimits
from tasks_store_sql import SQLStore

pytestmark = pytest.mark.anyio

Q = "limited"


async def _log(store: SQLStore) -> list[datetime]:
    log = store.tables.claims
    async with store.engine.connect() as conn:
        return list((await conn.execute(
            sa.select(log.c.claimed_at).where(log.c.queue == Q).order_by(log.c.claimed_at)
        )).scalars())


async def _kept_ms(store: SQLStore) -> int:
    locks = store.tables.locks
    async with store.engine.connect() as conn:
        value = (await conn.execute(
            sa.select(locks.c.value).where(locks.c.name == f"queue:{Q}"))).scalar_one()
    return int(value)


async def test_a_shorter_window_never_deletes_what_a_longer_one_counts(
    any_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock
) -> None:
    store = closing(await any_opener(clock=clock))
    for _ in range(6):
        await store.create(new_task(queue=Q))
    slow = {Q: QueueLimits(rate=(1, 60))}
    fast = {Q: QueueLimits(rate=(5, 10))}
    assert 1 == len(await store.claim_next("a", LEASE_S, queues=[Q], limit=3, limits=slow))
    start = clock.now()
    assert 60_000 == await _kept_ms(store)
    clock.advance(20)
    assert 3 == len(await store.claim_next("b", LEASE_S, queues=[Q], limit=3, limits=fast))
    assert 60_000 == await _kept_ms(store)  # the longest window stays
    assert 4 == len(await _log(store))  # the first claim kept: 60 s reach it
    clock.advance(10)
    assert [] == await store.claim_next("a", LEASE_S, queues=[Q], limit=3, limits=slow)
    clock.advance(31)  # the first claim is 61 s old
    [claim] = await store.claim_next("a", LEASE_S, queues=[Q], limit=1, limits=fast)
    log = await _log(store)
    assert start not in log  # past every window: deleted
    assert [clock.now()] == log[-1:]
    assert 4 == len(log)  # the 3 of b at 20 s, and this one
    assert claim.snapshot.queue == Q


async def test_a_queue_without_a_rate_logs_nothing(
    any_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock
) -> None:
    store = closing(await any_opener(clock=clock))
    for _ in range(2):
        await store.create(new_task(queue=Q))
    limits = {Q: QueueLimits(max_running=1)}
    assert 1 == len(await store.claim_next("a", LEASE_S, queues=[Q], limit=2, limits=limits))
    assert [] == await _log(store)
    assert 0 == await _kept_ms(store)
