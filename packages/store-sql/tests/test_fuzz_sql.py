"""The runtime model, bad-input fuzzing, forged leases, tenant isolation and persisted
garbage on SQLite, PostgreSQL and MariaDB (small, deterministic budgets: the memory store
runs the same properties deeper in tasks-core's tests)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from conftest import Opener
from sqlalchemy.ext.asyncio import create_async_engine
from tasks_contract_tests.garbage import JSON_GARBAGE, SECRET, check_contained, seed
from tasks_contract_tests.properties import PropertyChecks
from tasks_core import Failed, ManualClock, StoreCorrupt
from tasks_store_sql import SQLStore


class TestProperties(PropertyChecks):
    """The four property runs on SQLite, PostgreSQL and MariaDB."""

    @pytest.fixture
    def store_factory(self, any_opener: Opener) -> Opener:
        return any_opener


async def _damage(store: SQLStore, task_id: str, damage: Callable[[str], str],
                  *, events: bool = False) -> None:
    """Rewrite a stored JSON column behind the store's back, on a connection of its own."""
    engine = create_async_engine(store.engine.url)
    table = store.tables.events if events else store.tables.tasks
    column = table.c.record if events else table.c.snapshot
    key = table.c.task_id if events else table.c.id
    try:
        async with engine.begin() as conn:
            text = (await conn.execute(sa.select(column).where(key == task_id))).scalars().first()
            assert text is not None
            await conn.execute(sa.update(table).where(key == task_id)
                               .values({column.name: damage(text)}))
    finally:
        await engine.dispose()


@pytest.mark.anyio
@pytest.mark.parametrize("damage", JSON_GARBAGE.values(), ids=JSON_GARBAGE.keys())
async def test_a_garbage_snapshot_costs_only_its_record(
    any_opener: Opener, damage: Callable[[str], str]
) -> None:
    """A task row whose JSON snapshot was overwritten with garbage MUST read as
    ``StoreCorrupt`` naming only its id (to those who may learn of it; as missing to
    anyone else), and listings, ``claim_next`` and ``reap`` MUST carry on past it."""
    clock = ManualClock()
    store = await any_opener(clock=clock)
    try:
        seeded = await seed(store, clock)
        await _damage(store, seeded.victim, damage)
        await check_contained(store, clock, seeded)
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_a_garbage_history_record_costs_only_that_history(any_opener: Opener) -> None:
    """An event row overwritten with garbage MUST make that task's history
    ``StoreCorrupt`` (quoting nothing) and nothing else: the task itself and every other
    history still read."""
    clock = ManualClock()
    store = await any_opener(clock=clock)
    try:
        seeded = await seed(store, clock)
        ids = [seeded.victim, *seeded.others[:1]]
        for task_id in ids:
            _, lease = await store.claim(task_id, "w1", 30)
            # (a failure: its record is a history row, where a completion's is the task's)
            await store.transition(task_id, 0, Failed(event_id="done", error="Boom"), lease)
        await _damage(store, seeded.victim, lambda text: json.dumps({"event": SECRET}),
                      events=True)
        with pytest.raises(StoreCorrupt) as caught:
            await store.history(seeded.victim, tenant=None)
        assert seeded.victim == caught.value.task_id
        assert SECRET not in str(caught.value)
        assert "failed" == (await store.get(seeded.victim, tenant=None)).status
        assert ["failed"] == [r.kind for r in await store.history(ids[1], tenant=None)]
    finally:
        await store.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("column", ["created_at", "updated_at", "run_at"])
async def test_a_garbage_instant_on_sqlite_costs_only_its_record(
    sqlite_opener: Opener, column: str,
) -> None:
    """SQLite keeps instants as text, so a hand-edited instant column can hold anything; a
    record with garbage there MUST NOT stop ``claim_next`` from serving the others, and
    reads as corrupt."""
    clock = ManualClock()
    store = await sqlite_opener(clock=clock)
    try:
        seeded = await seed(store, clock)
        engine = create_async_engine(store.engine.url)
        t = store.tables.tasks
        try:
            async with engine.begin() as conn:
                await conn.execute(sa.update(t).where(t.c.id == seeded.victim)
                                   .values({column: sa.type_coerce("garbage", sa.String)}))
        finally:
            await engine.dispose()
        claimed = await store.claim_next("w1", 30, queues=["default"], limit=10)
        assert set(seeded.others) <= {c.snapshot.id for c in claimed}
        with pytest.raises(StoreCorrupt):
            await store.get(seeded.victim, tenant=None)
    finally:
        await store.aclose()
