"""Namespaces written by an earlier version are upgraded when the store opens: layout 1
(documents without ``_avail`` or ``_prio``, the ``claim_next`` index by creation) and
layout 2 (documents without ``_prio``, the ``claim_next`` index by available instant, no
``next_available`` index)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import ManualClock, RetryPolicy, RetryRequested, rules

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[Any]]

OLD_KEY = [("queue", 1), ("_ready", 1), ("created_at", 1), ("_id", 1), ("_ready_at", 1)]
V2_KEY = [("queue", 1), ("_ready", 1), ("_avail", 1), ("_id", 1), ("_ready_at", 1)]
CLAIM_KEY = ["queue", "_ready", "_prio", "_avail", "_id", "_ready_at"]
LAYOUT = {"_id": "layout", "v": 3}


async def _make_old(store: Any) -> None:
    """Turn the namespace of ``store`` back into the layout of the first version."""
    await store._tasks.update_many({}, {"$unset": {"_avail": "", "_prio": ""}})
    await store._tasks.drop_index("claim_next")
    await store._tasks.drop_index("next_available")
    await store._tasks.create_index(OLD_KEY, name="claim_next")
    await store._counters.delete_one({"_id": "layout"})


async def _make_v2(store: Any) -> None:
    """Turn the namespace of ``store`` back into layout 2 (before priorities)."""
    await store._tasks.update_many({}, {"$unset": {"_prio": ""}})
    await store._tasks.drop_index("claim_next")
    await store._tasks.drop_index("next_available")
    await store._tasks.create_index(V2_KEY, name="claim_next")
    await store._counters.replace_one({"_id": "layout"}, {"v": 2})


async def _claim_key(store: Any) -> list[str]:
    return [k for k, _ in (await store._tasks.index_information())["claim_next"]["key"]]


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

    assert CLAIM_KEY == await _claim_key(store)
    async for doc in store._tasks.find({}):
        snapshot = await store.get(doc["_id"], tenant=None)
        assert (rules.available_at(snapshot), 0) == (doc["_avail"], doc["_prio"])
    assert LAYOUT == await store._counters.find_one({"_id": "layout"})
    clock.advance(10)
    got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=5)
    assert [fresh.id, retried.id] == [claim.snapshot.id for claim in got]


async def test_an_upgraded_namespace_is_not_scanned_again(open_store: Opener) -> None:
    """Once the ``layout`` document records the upgrade, opening again MUST NOT touch the
    documents (no collection-wide update at every open)."""
    first = await open_store(clock=ManualClock())
    task = await first.create(new_task())
    await first._tasks.update_one({"_id": task.id}, {"$unset": {"_avail": "", "_prio": ""}})
    await open_store(clock=ManualClock())
    assert await first._tasks.find_one(
        {"_id": task.id, "$or": [{"_avail": {"$exists": True}}, {"_prio": {"$exists": True}}]}
    ) is None


async def test_open_fills_in_the_priority_and_replaces_the_index_of_layout_2(
    open_store: Opener,
) -> None:
    """Opening a namespace of layout 2 MUST give every document ``_prio`` (minus its
    ``priority``, 0 when none is stored), replace the ``claim_next`` index by available
    instant with the one by priority first, add the ``next_available`` index and record
    layout 3; ``claim_next`` then serves the highest priority first and
    ``next_available`` still finds the earliest delayed task, whatever its priority."""
    clock = ManualClock()
    first = await open_store(clock=clock)
    old = await first.create(new_task("zz-a-old"))
    clock.advance(1)
    low = await first.create(new_task("zz-b-low", priority=-5))
    urgent = await first.create(new_task("zz-c-urgent", priority=9))
    later = await first.create(new_task("zz-d-later", priority=-9, delay_s=30))
    await first.create(new_task("zz-e-latest", priority=9, delay_s=60))
    await _make_v2(first)
    assert 0 == await first._tasks.count_documents({"_prio": {"$exists": True}})

    store = await open_store(clock=clock)

    assert CLAIM_KEY == await _claim_key(store)
    indexes = await store._tasks.index_information()
    assert ["queue", "_ready", "_avail", "_id"] == [
        k for k, _ in indexes["next_available"]["key"]]
    async for doc in store._tasks.find({}):
        snapshot = await store.get(doc["_id"], tenant=None)
        assert -snapshot.priority == doc["_prio"]
    assert LAYOUT == await store._counters.find_one({"_id": "layout"})
    assert later.run_at == await store.next_available(["default"])
    got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=5)
    assert [urgent.id, old.id, low.id] == [claim.snapshot.id for claim in got]

