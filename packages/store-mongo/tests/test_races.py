"""Real races between stores on separate clients (separate connection pools), as between
worker processes: one winner per revision, per claim, per capacity slot."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tasks_contract_tests._kit import ALICE, LEASE_S, access, new_task
from tasks_core import (
    Cancelled,
    CapacityExceeded,
    Claim,
    InputRequested,
    LeaseLost,
    ManualClock,
    RevisionConflict,
    TaskQuery,
    Unavailable,
)

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[Any]]
CLIENTS = 4


async def _stores(open_store: Opener, clock: ManualClock, **options: Any) -> list[Any]:
    return [await open_store(clock=clock, **options) for _ in range(CLIENTS)]


async def _outcomes(calls: list[Awaitable[Any]]) -> list[Any]:
    return list(await asyncio.gather(*calls, return_exceptions=True))


async def test_request_writers_on_separate_clients_have_one_winner(open_store: Opener) -> None:
    """Cancels at one revision sent through separate clients MUST apply exactly once; every
    other writer MUST get ``RevisionConflict``."""
    stores = await _stores(open_store, ManualClock())
    task = await stores[0].create(new_task())
    calls = [
        stores[n % CLIENTS].transition(
            task.id, 0, Cancelled(event_id=f"cancel-{n}"), access(ALICE)
        )
        for n in range(12)
    ]
    results = await _outcomes(calls)
    kinds = Counter(
        r.outcome if not isinstance(r, BaseException) else type(r).__name__ for r in results
    )
    assert {"applied": 1, "RevisionConflict": 11} == dict(kinds)
    assert 1 == len(await stores[1].history(task.id, tenant=None))


async def test_lease_writers_on_separate_clients_have_one_winner(open_store: Opener) -> None:
    """Input requests by the lease holder at one revision, sent through separate clients,
    MUST apply exactly once (the others conflict) and leave one history entry."""
    stores = await _stores(open_store, ManualClock())
    task = await stores[0].create(new_task())
    _, lease = await stores[0].claim(task.id, "w1", LEASE_S)
    calls = [
        stores[n % CLIENTS].transition(
            task.id, 0, InputRequested(event_id=f"ask-{n}", key=f"k{n}"), lease
        )
        for n in range(12)
    ]
    results = await _outcomes(calls)
    applied = [r for r in results if not isinstance(r, BaseException)]
    assert 1 == len(applied)
    assert all(isinstance(r, RevisionConflict) for r in results if r not in applied)
    history = await stores[2].history(task.id, tenant=None)
    assert [applied[0].record.event_id] == [r.event_id for r in history]


async def test_exact_claims_on_separate_clients_have_one_winner(open_store: Opener) -> None:
    """Claims of one task through separate clients MUST yield exactly one lease; the
    others MUST be ``Unavailable``."""
    stores = await _stores(open_store, ManualClock())
    task = await stores[0].create(new_task())
    results = await _outcomes(
        [stores[n % CLIENTS].claim(task.id, f"w{n}", LEASE_S) for n in range(12)]
    )
    winners = [r for r in results if isinstance(r, Claim)]
    assert 1 == len(winners)
    assert all(isinstance(r, Unavailable) for r in results if not isinstance(r, Claim))
    assert 1 == (await stores[3].get(task.id, tenant=None)).deliveries


async def test_claim_next_on_separate_clients_never_shares_a_task(open_store: Opener) -> None:
    """Workers draining one queue through separate clients MUST claim every task exactly
    once."""
    stores = await _stores(open_store, ManualClock())
    ids = {(await stores[0].create(new_task())).id for _ in range(16)}

    async def drain(store: Any, worker: str) -> list[str]:
        got: list[str] = []
        while batch := await store.claim_next(worker, LEASE_S, queues=["default"], limit=2):
            got.extend(c.snapshot.id for c in batch)
        return got

    batches = await asyncio.gather(*(drain(s, f"w{n}") for n, s in enumerate(stores * 2)))
    claimed = [task_id for batch in batches for task_id in batch]
    assert {} == {k: v for k, v in Counter(claimed).items() if v > 1}
    assert ids == set(claimed)


async def test_exclusive_claims_on_separate_clients_hold_one_lease(open_store: Opener) -> None:
    """Exclusive claims of one queue through separate clients MUST hand out exactly one
    lease while it is live (a transaction on the queue's document serializes them)."""
    stores = await _stores(open_store, ManualClock())
    if not stores[0].capabilities.exclusive_queues:
        pytest.skip("exclusive queues need a replica set")
    for _ in range(5):
        await stores[0].create(new_task(queue="serial"))
    results = await asyncio.gather(
        *(
            stores[n % CLIENTS].claim_next(
                f"w{n}", LEASE_S, queues=["serial"], exclusive=["serial"], limit=3
            )
            for n in range(10)
        )
    )
    assert 1 == sum(len(batch) for batch in results)


async def test_stale_lease_is_refused_across_clients(open_store: Opener) -> None:
    """A lease renewed through one client MUST be stale for every client: the old token
    can no longer write."""
    first = await open_store()
    second = await open_store()
    task = await first.create(new_task())
    _, lease = await first.claim(task.id, "w1", LEASE_S)
    await second.renew(lease, LEASE_S)
    with pytest.raises(LeaseLost):
        await first.report_progress(lease, 50.0, None)


async def test_concurrent_creates_on_separate_clients_respect_max_tasks(
    open_store: Opener,
) -> None:
    """Creates racing through separate clients MUST store exactly ``max_tasks`` tasks and
    refuse the rest with ``CapacityExceeded``; the stored counter MUST match."""
    stores = await _stores(open_store, ManualClock(), max_tasks=5)
    results = await _outcomes(
        [stores[n % CLIENTS].create(new_task(owner=None, tenant=f"t{n}")) for n in range(14)]
    )
    created = [r for r in results if not isinstance(r, BaseException)]
    assert 5 == len(created)
    assert all(isinstance(r, CapacityExceeded) for r in results if r not in created)
    listed = await stores[0].list(TaskQuery(tenant=None, limit=100))
    assert sorted(s.id for s in created) == [s.id for s in listed]
    counter = await stores[0]._counters.find_one({"_id": "tasks"})
    assert 5 == counter["n"]


async def test_concurrent_creates_on_separate_clients_respect_the_tenant_limit(
    open_store: Opener,
) -> None:
    """Creates in one tenant racing through separate clients MUST leave at most
    ``max_active_tasks_per_scope`` active tasks (no write skew between the counts) — on
    a standalone server too (``_scopes``' counter; ``test_scopes`` races threads)."""
    stores = await _stores(open_store, ManualClock(), max_active_tasks_per_scope=3)
    results = await _outcomes([stores[n % CLIENTS].create(new_task()) for n in range(12)])
    created = [r for r in results if not isinstance(r, BaseException)]
    assert 3 == len(created)
    assert all(isinstance(r, CapacityExceeded) for r in results if r not in created)


async def test_a_burst_of_creates_in_one_tenant_all_land(open_store: Opener) -> None:
    """A burst of concurrent creates in one tenant, far below every limit, MUST all be
    stored: they conflict on the tenant's counter, and each waits its turn rather than
    being refused (``StoreUnavailable`` is for outages, not for a busy tenant)."""
    stores = await _stores(open_store, ManualClock())
    if not stores[0]._transactions:
        pytest.skip("the tenant's counter is transactional on a replica set only")
    burst = 80
    results = await _outcomes(
        [stores[n % CLIENTS].create(new_task()) for n in range(burst)]
    )
    assert [] == [type(r).__name__ for r in results if isinstance(r, BaseException)]
    assert burst == len(await stores[0].list(TaskQuery(tenant=None, limit=1000)))


async def test_concurrent_replaces_on_separate_clients_respect_the_tenant_limit(
    open_store: Opener,
) -> None:
    """New runs of finished tasks (``create(replace=...)``, which take no new slot of
    ``max_tasks``) racing through separate clients MUST still leave at most
    ``max_active_tasks_per_scope`` active tasks in the tenant."""
    stores = await _stores(open_store, ManualClock(), max_active_tasks_per_scope=2)
    await stores[0].create(new_task())
    finished = []
    for _ in range(CLIENTS):
        task = await stores[0].create(new_task())
        done = await stores[0].transition(task.id, 0, Cancelled(event_id="c"), access(ALICE))
        finished.append(done.snapshot)
    results = await _outcomes(
        [
            stores[n].create(new_task(snapshot.id), replace=snapshot)
            for n, snapshot in enumerate(finished)
        ]
    )
    created = [r for r in results if not isinstance(r, BaseException)]
    assert 1 == len(created)
    assert all(isinstance(r, CapacityExceeded) for r in results if r not in created)
