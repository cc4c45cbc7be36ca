"""Namespaces written by an earlier version: documents without ``_avail`` and the old
``claim_next`` index (by creation) are upgraded when the store opens."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import ManualClock, RetryPolicy, RetryRequested, rules

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[Any]]

OLD_KEY = [("queue", 1), ("_ready", 1), ("created_at", 1), ("_id", 1), ("_ready_at", 1)]


async def _make_old(store: Any) -> None:
    """Turn the namespace of ``store`` back into the layout of the earlier version."""
    await store._tasks.update_many({}, {"$unset": {"_avail": ""}})
    await store._tasks.drop_index("claim_next")
    await store._tasks.create_index(OLD_KEY, name="claim_next")
    await store._counters.delete_one({"_id": "layout"})


async def test_open_fills_in_the_available_instant_and_replaces_the_old_index(
    open_store: Opener,
) -> None:
    """Opening a namespace of the earlier layout MUST give every document its available
    instant (``rules.available_at``) and replace the ``claim_next`` index by creation with
    the one by available instant, once; ``claim_next`` then serves by available instant
    (a retry due after a newer task was created comes after it)."""
    clock = ManualClock()
    first = await open_store(clock=clock)
    retried = await first.create(new_task(retry=RetryPolicy.fixed(5, attempts=2)))
    held = await first.claim(retried.id, "w0", LEASE_S)
    await first.transition(retried.id, held.snapshot.revision,
                           RetryRequested(event_id="again", error="E"), held.lease)
    clock.advance(1)
    fresh = await first.create(new_task())
    await _make_old(first)
    assert 0 == await first._tasks.count_documents({"_avail": {"$exists": True}})

    store = await open_store(clock=clock)

    keys = [k for k, _ in (await store._tasks.index_information())["claim_next"]["key"]]
    assert ["queue", "_ready", "_avail", "_id", "_ready_at"] == keys
    async for doc in store._tasks.find({}):
        snapshot = await store.get(doc["_id"], tenant=None)
        assert rules.available_at(snapshot) == doc["_avail"]
    assert {"_id": "layout", "v": 2} == await store._counters.find_one({"_id": "layout"})
    clock.advance(10)
    got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=5)
    assert [fresh.id, retried.id] == [claim.snapshot.id for claim in got]


async def test_an_upgraded_namespace_is_not_scanned_again(open_store: Opener) -> None:
    """Once the ``layout`` document records the upgrade, opening again MUST NOT touch the
    documents (no collection-wide update at every open)."""
    first = await open_store(clock=ManualClock())
    task = await first.create(new_task())
    await first._tasks.update_one({"_id": task.id}, {"$unset": {"_avail": ""}})
    await open_store(clock=ManualClock())
    assert await first._tasks.find_one({"_id": task.id, "_avail": {"$exists": True}}) is None
