"""The owner is a column of the task's row (``tasks.owner``, migration 0012), not a
``task_members`` row: every create path writes it, a listing by principal reads the
tasks it owns from the owner index and those it watches from the members, merged in id
order page after page; migration 0012 moves owner rows into the column and back, up,
down and up with tasks in it.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from conftest import Opener
from tasks_contract_tests._kit import ALICE, SYSTEM, access, new_task
from tasks_core import ManualClock, Owner, TaskQuery, WatcherAdded
from tasks_store_sql import SQLStore, migrate

pytestmark = pytest.mark.anyio

BOB = Owner("bob")


async def _members(store: SQLStore) -> list[tuple[str, str, str]]:
    m = store.tables.members
    async with store.engine.connect() as conn:
        found = await conn.execute(sa.select(m.c.task_id, m.c.user_id, m.c.role)
                                   .order_by(m.c.task_id, m.c.user_id))
        return [(str(a), str(b), str(c)) for a, b, c in found]


async def _owners(store: SQLStore) -> dict[str, str | None]:
    t = store.tables.tasks
    async with store.engine.connect() as conn:
        found = await conn.execute(sa.select(t.c.id, t.c.owner))
        return {str(i): None if o is None else str(o) for i, o in found}


async def _listed(store: SQLStore, who: Owner, limit: int) -> list[str]:
    """Every task ``who`` may list, page by page of ``limit``."""
    ids: list[str] = []
    after = None
    while True:
        page = await store.list(TaskQuery(tenant="default", principal=who, limit=limit,
                                          after=after))
        ids += [s.id for s in page]
        if len(page) < limit:
            return ids
        after = page[-1].id


async def _mixed(store: SQLStore) -> None:
    """Tasks owned by alice or bob, some watched by the other, one owned by nobody,
    created one by one and in a batch, ids interleaved."""
    await store.create(new_task("a1"))
    await store.create(new_task("b2", owner=BOB, watchers=(ALICE,)))
    await store.create(new_task("n3", owner=None))
    await store.create_many([
        new_task("a4", watchers=(BOB,)), new_task("b5", owner=BOB), new_task("a6")])
    await store.transition("b5", 0, WatcherAdded(event_id="w", principal=ALICE),
                           access(SYSTEM))


async def test_the_owner_is_a_column_and_watchers_are_members(
    any_opener: Opener, closing: Any
) -> None:
    """Single and batch creates write the owner's user id in the row and a member row
    for each watcher only; a watcher added later is a member row too."""
    store: SQLStore = closing(await any_opener(clock=ManualClock()))
    await _mixed(store)
    assert await _owners(store) == {"a1": "alice", "b2": "bob", "n3": None, "a4": "alice",
                                    "b5": "bob", "a6": "alice"}
    assert await _members(store) == [("a4", "bob", "watcher"), ("b2", "alice", "watcher"),
                                     ("b5", "alice", "watcher")]


@pytest.mark.parametrize("limit", [1, 2, 100])
async def test_a_principal_lists_what_it_owns_and_watches_in_id_order(
    any_opener: Opener, closing: Any, limit: int
) -> None:
    """Owned and watched tasks come merged in id order, each once, page after page; a
    principal of another tenant lists none of them."""
    store: SQLStore = closing(await any_opener(clock=ManualClock()))
    await _mixed(store)
    assert await _listed(store, ALICE, limit) == ["a1", "a4", "a6", "b2", "b5"]
    assert await _listed(store, BOB, limit) == ["a4", "b2", "b5"]
    assert await _listed(store, Owner("alice", tenant="other"), limit) == []


async def test_migration_0012_goes_up_down_and_up_with_tasks_in_it(
    db_url: str, fresh_namespace: str
) -> None:
    """Down to 0011 the owners are member rows again beside the watchers; up again they
    are columns, and every principal lists what it listed before."""
    await migrate(db_url, namespace=fresh_namespace)
    store = await SQLStore.open(db_url, namespace=fresh_namespace, clock=ManualClock())
    try:
        await _mixed(store)
        before = {who.user_id: await _listed(store, who, 2) for who in (ALICE, BOB)}
        owners = await _owners(store)
        await migrate(db_url, namespace=fresh_namespace, to="0011")
        m = store.tables.members
        async with store.engine.connect() as conn:
            rows = await conn.execute(sa.select(m.c.task_id, m.c.user_id, m.c.role)
                                      .order_by(m.c.task_id, m.c.user_id))
            stored = [(str(a), str(b), str(c)) for a, b, c in rows]
        assert stored == sorted(
            [(task_id, owner, "owner") for task_id, owner in owners.items() if owner]
            + [("a4", "bob", "watcher"), ("b2", "alice", "watcher"),
               ("b5", "alice", "watcher")])
        await migrate(db_url, namespace=fresh_namespace)
        assert await _owners(store) == owners
        assert [role for _, _, role in await _members(store)] == ["watcher"] * 3
        assert {who.user_id: await _listed(store, who, 2) for who in (ALICE, BOB)} == before
    finally:
        await store.aclose()
