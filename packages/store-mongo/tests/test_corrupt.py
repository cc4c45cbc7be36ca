"""A document that fails validation raises ``StoreCorrupt`` naming its task, never quoting
stored data, and costs only itself: listings, claims and reaping carry on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tasks_contract_tests._kit import ALICE, LEASE_S, access, new_task
from tasks_core import (
    Cancelled,
    ManualClock,
    StoreCorrupt,
    TaskQuery,
)

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[Any]]
SECRET = "tasks-corrupt-secret"

# Ways a document can be damaged (by hand, by another program, by a bad migration).
DAMAGE: dict[str, dict[str, Any]] = {
    "revision is text": {"$set": {"revision": f"x {SECRET}"}},
    "status unknown": {"$set": {"status": SECRET}},
    "input is not JSON": {"$set": {"work.input": "{" + SECRET}},
    "created_at missing": {"$unset": {"created_at": ""}},
    "claim is text": {"$set": {"claim": SECRET}},
    "tenant is invalid": {"$set": {"tenant": "a::b" + SECRET}},
}


async def _damaged(open_store: Opener, damage: dict[str, Any]) -> tuple[Any, str, list[str]]:
    """A store with a claimable corrupt task among healthy ones: ``(store, corrupt id,
    healthy ids)``. The task was claimed and released, so it has a claim to damage."""
    store = await open_store(clock=ManualClock())
    ids = [(await store.create(new_task())).id for _ in range(3)]
    bad = ids[1]
    _, lease = await store.claim(bad, "w1", LEASE_S)
    await store.release(lease)
    await store._tasks.update_one({"_id": bad}, damage)
    return store, bad, [i for i in ids if i != bad]


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
async def test_corrupt_document_reads_as_store_corrupt_naming_only_its_id(
    open_store: Opener, damage: dict[str, Any]
) -> None:
    """Reading a damaged document MUST raise ``StoreCorrupt`` with its task id and MUST
    NOT quote the stored data."""
    store, bad, _ = await _damaged(open_store, damage)
    with pytest.raises(StoreCorrupt) as caught:
        await store.get(bad, tenant=None)
    assert bad == caught.value.task_id
    assert SECRET not in str(caught.value)
    with pytest.raises(StoreCorrupt):
        await store.claim(bad, "w2", LEASE_S)


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
async def test_corrupt_document_costs_only_itself(
    open_store: Opener, damage: dict[str, Any]
) -> None:
    """Listings, ``claim_next`` and ``reap`` MUST skip a damaged document and serve every
    healthy one; writes to healthy tasks MUST go on."""
    store, _, healthy = await _damaged(open_store, damage)
    assert healthy == [s.id for s in await store.list(TaskQuery(tenant=None))]
    claimed = await store.claim_next("w2", LEASE_S, queues=["default"], limit=10)
    assert healthy == [c.snapshot.id for c in claimed]
    done = await store.transition(healthy[0], 0, Cancelled(event_id="c"), access(ALICE))
    assert "applied" == done.outcome
    assert [] == await store.reap()


async def test_damaged_lease_token_reads_as_store_corrupt(open_store: Opener) -> None:
    """A lease token that is not a string MUST make every lease check raise
    ``StoreCorrupt`` (never ``LeaseLost``, which would hide the damage)."""
    store = await open_store(clock=ManualClock())
    task = await store.create(new_task())
    _, lease = await store.claim(task.id, "w1", LEASE_S)
    await store._tasks.update_one({"_id": task.id}, {"$set": {"_token": 42}})
    for call in (store.renew(lease, LEASE_S), store.worker_snapshot(lease), store.release(lease)):
        with pytest.raises(StoreCorrupt):
            await call


async def test_reap_skips_a_corrupt_expired_document(open_store: Opener) -> None:
    """``reap`` MUST delete the healthy expired tasks and leave a corrupt one in place."""
    clock = ManualClock()
    store = await open_store(clock=clock)
    ids = [(await store.create(new_task(ttl_s=10))).id for _ in range(3)]
    await store._tasks.update_one({"_id": ids[0]}, {"$set": {"revision": SECRET}})
    clock.advance(11)
    assert ids[1:] == await store.reap()
    assert 1 == await store._tasks.count_documents({})


async def test_corrupt_history_entry_reads_as_store_corrupt(open_store: Opener) -> None:
    """A damaged history entry MUST make ``history`` (and a replay that reads it) raise
    ``StoreCorrupt`` for that task only."""
    store = await open_store(clock=ManualClock())
    task = await store.create(new_task())
    other = await store.create(new_task())
    event = Cancelled(event_id="c")
    await store.transition(task.id, 0, event, access(ALICE))
    await store._tasks.update_one({"_id": task.id}, {"$set": {"_history.0.event": SECRET}})
    with pytest.raises(StoreCorrupt) as caught:
        await store.history(task.id, tenant=None)
    assert SECRET not in str(caught.value)
    with pytest.raises(StoreCorrupt):
        await store.transition(task.id, 0, event, access(ALICE))
    assert [] == await store.history(other.id, tenant=None)
