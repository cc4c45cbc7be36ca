"""PostgreSQL's one-statement ``create``: the same task as ``rules.new_snapshot`` at the
clock read after the creators' lock.

A new task is created by one statement, its own transaction (``Statements.create``): it
locks the creators' row, reads the clock, inserts only while the stored tasks are fewer
than both capacity limits, and spells the clock's instants into snapshot text made in
Python at a stand-in instant. These tests hold what it stores to what the codec would
write for the snapshot it returns — on the injected clock (a whole second and not), with
and without a TTL, on the database's clock — and check that it leaves to the deciding
transaction what it cannot decide: a taken id, a store at a limit, a user's value that
spells the stand-in instant.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import Opener
from tasks_contract_tests._kit import new_task
from tasks_core import CapacityExceeded, ManualClock, Owner, Snapshot, TaskExists, TaskQuery
from tasks_store_sql import SQLStore, _codec, _pg

pytestmark = pytest.mark.anyio

IN_A, IN_B = Owner("alice", tenant="a"), Owner("bob", tenant="b")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def at_once(monkeypatch: pytest.MonkeyPatch) -> list[Snapshot | None]:
    """What each one-statement create returned (``None``: left to the transaction)."""
    outcomes: list[Snapshot | None] = []
    original = _pg.FastPath.create_at_once

    async def recorded(self: _pg.FastPath, *args: Any) -> Snapshot | None:
        outcome = await original(self, *args)
        outcomes.append(outcome)
        return outcome

    monkeypatch.setattr(_pg.FastPath, "create_at_once", recorded)
    return outcomes


async def _row(store: SQLStore, task_id: str) -> sa.Row[Any]:
    t = store.tables.tasks
    async with store.engine.connect() as conn:
        found = await conn.execute(
            sa.select(t.c.snapshot, t.c.created_at, t.c.updated_at, t.c.expires_at,
                      t.c.status, t.c.row_version).where(t.c.id == task_id)
        )
        return found.one()


async def _stored_as_returned(store: SQLStore, created: Snapshot) -> None:
    """The row holds exactly ``created``: the codec's text of it, and its columns."""
    row = await _row(store, created.id)
    assert row.snapshot == _codec.encode_snapshot(created)
    assert (row.created_at, row.updated_at, row.expires_at) == (
        created.created_at, created.updated_at, created.expires_at)
    assert (row.status, row.row_version) == ("pending", 0)


@pytest.mark.parametrize("start", [
    datetime(2030, 1, 1, tzinfo=UTC),  # a whole second: spelled without a fraction
    datetime(2030, 1, 1, 12, 30, 5, 239000, tzinfo=UTC),
])
@pytest.mark.parametrize("ttl_s", [None, 90.5])
async def test_a_new_task_is_stored_at_the_clock_in_one_statement(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore],
    at_once: list[Snapshot | None], start: datetime, ttl_s: float | None,
) -> None:
    store = closing(await postgres_opener(clock=ManualClock(start)))
    created = await store.create(new_task(input={"at": "x"}, ttl_s=ttl_s))

    assert at_once == [created]
    assert (created.created_at, created.updated_at) == (start, start)
    assert created.expires_at == (None if ttl_s is None else start + timedelta(seconds=ttl_s))
    await _stored_as_returned(store, created)
    assert await store.get(created.id, tenant="default") == created


async def test_on_the_database_clock_the_instants_are_the_databases(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore],
    at_once: list[Snapshot | None],
) -> None:
    store = closing(await postgres_opener())
    before = await store.now()
    created = await store.create(new_task(ttl_s=60))
    after = await store.now()

    assert at_once == [created]
    assert before <= created.created_at <= after
    assert created.expires_at == created.created_at + timedelta(seconds=60)
    await _stored_as_returned(store, created)


async def test_a_value_that_spells_the_stand_in_leaves_the_create_to_the_transaction(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    at_once: list[Snapshot | None], monkeypatch: pytest.MonkeyPatch,
) -> None:
    stand_in = datetime(1500, 6, 1, 12, 0, 0, 1000, tzinfo=UTC)
    monkeypatch.setattr(_pg, "_stand_in", lambda: stand_in)
    store = closing(await postgres_opener(clock=clock))
    spelled = _codec.instant_json(stand_in).strip('"')

    created = await store.create(new_task(input={"when": spelled}))

    assert at_once == [None]  # nothing written by the statement; the transaction created it
    assert created.work.input == {"when": spelled}
    assert created.created_at == clock.now()
    assert await store.get(created.id, tenant="default") == created
    assert len(await store.list(TaskQuery(tenant=None))) == 1


async def test_a_taken_id_and_a_full_store_are_refused_by_the_transaction(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    at_once: list[Snapshot | None],
) -> None:
    store = closing(await postgres_opener(clock=clock, max_tasks=2))
    first = await store.create(new_task("a"))
    with pytest.raises(TaskExists):
        await store.create(new_task("a"))
    await store.create(new_task("b"))
    with pytest.raises(CapacityExceeded):
        await store.create(new_task("c"))

    assert [outcome is not None for outcome in at_once] == [True, False, True, False]
    assert [s.id for s in await store.list(TaskQuery(tenant=None))] == ["a", "b"]
    assert await store.get("a", tenant="default") == first


async def test_past_the_active_limit_of_one_scope_the_transaction_counts_the_scope(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    at_once: list[Snapshot | None],
) -> None:
    """With as many stored tasks as one tenant may have active, the statement cannot tell
    whether this tenant is full; the transaction counts it."""
    store = closing(await postgres_opener(clock=clock, max_active_tasks_per_scope=2))
    await store.create(new_task("a1", owner=IN_A))
    await store.create(new_task("a2", owner=IN_A))
    created = await store.create(new_task("b1", owner=IN_B))
    with pytest.raises(CapacityExceeded):
        await store.create(new_task("a3", owner=IN_A))

    assert [outcome is not None for outcome in at_once] == [True, True, False, False]
    assert created.tenant == "b"
    await _stored_as_returned(store, created)
