"""``max_active_tasks_per_scope`` is checked against a bound on each tenant's active tasks
(``_scopes``), so a create counts the tenant only when the bound leaves no room: once the
store holds more tasks than the limit (finished ones, kept for their retention, count),
a tenant far from its limit is counted once in many creates, not at every create — and
every refusal is still exact.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from tasks_core import CapacityExceeded, Completed, NewTask, Owner, TaskExists, Work
from tasks_store_sql import SQLStore, _scopes
from tasks_store_sql import store as store_module
from tasks_store_sql.postgres import _creates as _pg

pytestmark = pytest.mark.anyio

LIMIT = 5


def _new(task_id: str, tenant: str = "a") -> NewTask:
    owner = Owner("alice", tenant=tenant)
    return NewTask(id=task_id, tenant=tenant, owner=owner, work=Work(name="job"))


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each count of a tenant's active tasks a create made."""
    made: list[str] = []

    async def spied(stored: int, bound: int | None, limit: int,
                    count: Callable[[], Awaitable[int]]) -> int | None:
        async def counting() -> int:
            made.append("count")
            return await count()

        return await _scopes.room_for_one(stored, bound, limit, counting)

    monkeypatch.setattr(store_module, "room_for_one", spied)
    monkeypatch.setattr(_pg, "room_for_one", spied)
    return made


@pytest.fixture
async def store(db_url: str, fresh_namespace: str) -> AsyncIterator[SQLStore]:
    opened = await SQLStore.open(db_url, namespace=fresh_namespace,
                                 max_active_tasks_per_scope=LIMIT)
    for n in range(LIMIT + 1):  # more stored tasks than the limit, none of tenant "a"
        await opened.create(_new(f"other{n}", tenant=f"o{n}"))
    yield opened
    await opened.aclose()


async def _finish(store: SQLStore, task_id: str) -> None:
    claimed = await store.claim(task_id, "w1", 30)
    await store.transition(task_id, claimed.snapshot.revision, Completed(event_id="done"),
                           claimed.lease)


async def test_a_tenant_far_from_its_limit_is_counted_once(
    store: SQLStore, counts: list[str]
) -> None:
    for n in range(LIMIT):
        await store.create(_new(f"a{n}"))
    assert counts == ["count"]  # the first create: the bound was the stored tasks

    with pytest.raises(CapacityExceeded):
        await store.create(_new("one-too-many"))
    assert counts == ["count"] * 2  # the bound reached the limit: counted, and full


async def test_a_bound_above_the_truth_is_counted_down_exactly(
    store: SQLStore, counts: list[str]
) -> None:
    for n in range(LIMIT):
        await store.create(_new(f"a{n}"))
    await _finish(store, "a0")
    await _finish(store, "a1")

    created = [await store.create(_new(f"b{n}")) for n in range(2)]
    with pytest.raises(CapacityExceeded):
        await store.create(_new("b2"))
    assert [s.id for s in created] == ["b0", "b1"]
    assert counts == ["count"] * 3  # the first create, at the bound b0 met, and at b2


async def test_tenants_have_bounds_of_their_own(store: SQLStore, counts: list[str]) -> None:
    for n in range(LIMIT):
        await store.create(_new(f"a{n}"))
    created = await store.create(_new("b0", tenant="b"))
    assert created.tenant == "b"
    with pytest.raises(CapacityExceeded):
        await store.create(_new("a5"))
    assert counts == ["count"] * 3  # a's first, b's first (no bound yet), a's at the limit


async def test_a_refused_create_stores_no_bound(store: SQLStore, counts: list[str]) -> None:
    """A create refused for another reason (here: its id is taken) leaves the bound as it
    was: the task it would have added was never stored."""
    for n in range(LIMIT - 1):
        await store.create(_new(f"a{n}"))
    with pytest.raises(TaskExists):
        await store.create(_new("a0"))
    await store.create(_new("last"))  # the bound has room for it: not counted
    with pytest.raises(CapacityExceeded):
        await store.create(_new("one-too-many"))
    assert counts == ["count"] * 2
