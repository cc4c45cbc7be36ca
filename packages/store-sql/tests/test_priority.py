"""The ``neg_priority`` column: on every backend, after every kind of write, it holds minus
the stored snapshot's priority (the claim index's first key after queue and status);
migration 0007 fills it in from the text of stored tasks. On PostgreSQL the claim
statements serve tasks of any priority in claim order, each stored byte for byte as
``rules.start_claim`` decides, with no claim decided in Python.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from _stored_kit import stored_as_projected, stored_row, stored_snapshot
from conftest import Opener
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import ManualClock, RetryPolicy, RetryRequested, Snapshot, rules
from tasks_store_sql import SQLStore, _codec, migrate
from tasks_store_sql._schema import head_columns
from tasks_store_sql._stored import Stored, stored_columns

pytestmark = pytest.mark.anyio

WORKER = "w-priority"


async def _columns(store: SQLStore) -> dict[str, tuple[int, int]]:
    """Each task's stored ``neg_priority`` and the priority of its decoded snapshot."""
    t = store.tables.tasks
    async with store.engine.connect() as conn:
        rows = (await conn.execute(
            sa.select(t.c.id, t.c.neg_priority, *stored_columns(t)))).all()
    return {task_id: (stored, _codec.decode_snapshot(task_id, Stored(*row)).priority)
            for task_id, stored, *row in rows}


async def _check(store: SQLStore) -> None:
    for task_id, (stored, priority) in (await _columns(store)).items():
        assert stored == -priority, f"neg_priority of {task_id} after the last write"


async def test_neg_priority_is_minus_the_priority_after_every_write(
    any_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock
) -> None:
    store = closing(await any_opener(clock=clock))
    retry = RetryPolicy.fixed(1, attempts=3)
    made = [await store.create(new_task(f"t{p}", priority=p, retry=retry))
            for p in (0, 100, -100, 7)]
    made += await store.create_many([new_task(f"m{p}", priority=p) for p in (0, -1, 1)])
    await _check(store)  # created, one by one and in a batch
    claims = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=10)
    assert [c.snapshot.priority for c in claims] == [100, 7, 1, 0, 0, -1, -100]
    await _check(store)  # claimed
    for claim in claims[:2]:
        await store.transition(claim.snapshot.id, claim.snapshot.revision,
                               RetryRequested(event_id="again", error="E"), claim.lease)
    await store.release(claims[2].lease)
    await _check(store)  # a retry pending, a release
    assert len(made) == 7


async def test_migration_0007_fills_neg_priority_from_the_stored_text(
    db_url: str, fresh_namespace: str, clock: ManualClock
) -> None:
    """Tasks stored before 0007 spell their priority in their text only; the upgrade gives
    each its ``neg_priority`` (a record that is not JSON keeps 0) and the claim serves
    them in claim order."""
    await migrate(db_url, namespace=fresh_namespace)
    store = await SQLStore.open(db_url, namespace=fresh_namespace, clock=clock)
    try:
        for priority in (0, 5, -5):
            await store.create(new_task(f"p{priority}", priority=priority))
        await migrate(db_url, namespace=fresh_namespace, to="0006")
        t = store.tables.tasks
        values = _codec.projection(
            rules.new_snapshot(new_task("broken", priority=9), clock.now()), None)
        for later in ("neg_priority", "final_event", "owner",
                      *(c.name for c in head_columns())):  # (not columns at 0006)
            del values[later]
        values["snapshot"] = '{"priority": 9, not json'
        async with store.engine.begin() as conn:  # a record that is not JSON at all
            await conn.execute(sa.insert(t).values(id="broken", row_version=0, **values))
        await migrate(db_url, namespace=fresh_namespace)
        columns = await _columns_raw(store)
        claims = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=5)
    finally:
        await store.aclose()
    assert columns == {"p0": 0, "p5": -5, "p-5": 5, "broken": 0}
    assert [c.snapshot.id for c in claims] == ["p5", "p0", "p-5"]


async def _columns_raw(store: SQLStore) -> dict[str, int]:
    t = store.tables.tasks
    async with store.engine.connect() as conn:
        return dict((await conn.execute(sa.select(t.c.id, t.c.neg_priority))).tuples().all())


async def test_the_statements_claim_every_priority_in_claim_order(
    pg_store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's priority is spelled past the head (``,"priority":n`` last), so the fresh
    statement claims new tasks of any priority and the one that takes heads apart a
    released one: one ``claim_next`` serves both in claim order, the highest priority
    first, each stored byte for byte as ``rules.start_claim`` decides."""
    store = pg_store
    low = await store.create(new_task("a-low", priority=-5))
    clock.advance(1)
    released = await store.create(new_task("b-released", priority=3))
    [first] = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1)
    assert first.snapshot.id == released.id
    await store.release(first.lease)
    clock.advance(1)
    plain = await store.create(new_task("c-plain"))
    urgent = await store.create(new_task("d-urgent", priority=100))
    clock.advance(1)
    now = rules.tick(clock.now())
    expected: dict[str, Snapshot] = {}
    for task in (low, released, plain, urgent):
        before = await _stored(store, task.id)
        expected[task.id], _, _, _ = rules.start_claim(before, WORKER, LEASE_S, now)

    async def refused(*args: object) -> object:
        raise AssertionError("the claim statement left a row to the claim in Python")

    monkeypatch.setattr(store, "_claim_locked", refused)
    got = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=2)
    got += await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=5)

    assert [c.snapshot.id for c in got] == [urgent.id, released.id, plain.id, low.id]
    for claim in got:
        stored = await stored_row(store, claim.snapshot.id)
        assert stored == stored_as_projected(expected[claim.snapshot.id])
        assert json.loads(stored.body).get("priority", 0) == claim.snapshot.priority


async def _stored(store: SQLStore, task_id: str) -> Snapshot:
    return await stored_snapshot(store, task_id)
