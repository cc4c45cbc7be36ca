"""The ``available_at`` column: on every backend, after every kind of write, it holds
``rules.available_at`` of the stored snapshot (a retry's ``retry_at``, a delayed task's
``run_at``, else the creation), ``run_at`` the snapshot's — the claim index's order and
the range ``next_available`` reads. Migration 0006 fills it in for stored tasks.

A model test: whatever path wrote the row (PostgreSQL's claim statements or its create
statement, the claim decided in Python, a transition), the columns are compared with what
the rules derive from the decoded text — never with a constant.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from conftest import Opener
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import ManualClock, RetryPolicy, RetryRequested, rules
from tasks_store_sql import SQLStore, _codec, migrate
from tasks_store_sql._stored import Stored, stored_columns

pytestmark = pytest.mark.anyio

Columns = dict[str, tuple[datetime, datetime | None, datetime]]


async def _columns(store: SQLStore) -> Columns:
    """Each task's stored ``(available_at, run_at)`` and ``rules.available_at`` of its
    decoded snapshot."""
    t = store.tables.tasks
    async with store.engine.connect() as conn:
        rows = (await conn.execute(
            sa.select(t.c.id, t.c.available_at, t.c.run_at, *stored_columns(t)))).all()
    found = {}
    for task_id, available, run_at, *stored in rows:
        snapshot = _codec.decode_snapshot(task_id, Stored(*stored))
        assert run_at == snapshot.run_at, task_id
        found[task_id] = (available, run_at, rules.available_at(snapshot))
    return found


async def _check(store: SQLStore) -> None:
    for task_id, (stored, _, derived) in (await _columns(store)).items():
        assert stored == derived, f"available_at of {task_id} after the last write"


async def test_available_at_is_the_rules_after_create_claim_retry_release_and_lapse(
    any_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock
) -> None:
    store = closing(await any_opener(clock=clock))
    retry = RetryPolicy.fixed(30, attempts=3)
    plain = await store.create(new_task("a-plain", retry=retry))
    delayed = await store.create(new_task("b-delayed", delay_s=5, retry=retry))
    given = await store.create(new_task("c-given", run_at=clock.now() + timedelta(seconds=7)))
    together = await asyncio.gather(  # PostgreSQL: one create statement for them
        *(store.create(new_task(f"d-{n}", delay_s=n or None, ttl_s=60)) for n in range(4)))
    for n, made in enumerate(together):
        stored = await store.get(made.id, tenant=None)
        assert made == stored.model_copy(update={"status": made.status})
        assert made.run_at == (made.created_at + timedelta(seconds=n) if n else None)
    await _check(store)  # created

    clock.advance(10)
    claims = await store.claim_next("w1", LEASE_S, queues=["default"], limit=10)
    assert {plain.id, delayed.id, given.id} <= {c.snapshot.id for c in claims}
    await _check(store)  # claimed (new tasks, delayed ones)
    by_id = {c.snapshot.id: c for c in claims}

    for task_id in (plain.id, delayed.id):
        held = by_id[task_id]
        done = await store.transition(task_id, held.snapshot.revision,
                                      RetryRequested(event_id="again", error="E"), held.lease)
        assert done.snapshot.retry_at is not None
    await store.release(by_id[given.id].lease)
    await _check(store)  # a retry pending, a release

    clock.advance(31)
    again = await store.claim_next("w2", LEASE_S, queues=["default"], limit=10)
    assert {plain.id, delayed.id, given.id} <= {c.snapshot.id for c in again}
    await _check(store)  # due retries claimed: retry_at cleared, run_at or creation again

    clock.advance(LEASE_S + 1)  # every lease lapses
    lapsed = await store.claim_next("w3", LEASE_S, queues=["default"], limit=10)
    assert {plain.id, delayed.id, given.id} <= {c.snapshot.id for c in lapsed}
    await _check(store)  # lapsed leases taken over


async def test_migration_0006_fills_available_at_from_the_retry_or_the_creation(
    db_url: str, fresh_namespace: str, clock: ManualClock
) -> None:
    """Stored tasks (none delayed before 0006) get ``COALESCE(retry_at, created_at)``."""
    await migrate(db_url, namespace=fresh_namespace)
    store = await SQLStore.open(db_url, namespace=fresh_namespace, clock=clock)
    try:
        retried = await store.create(new_task("retried", retry=RetryPolicy.fixed(30, attempts=2)))
        clock.advance(1)
        await store.create(new_task("plain"))
        held = await store.claim(retried.id, "w1", LEASE_S)
        await store.transition(retried.id, held.snapshot.revision,
                               RetryRequested(event_id="again", error="E"), held.lease)
        await migrate(db_url, namespace=fresh_namespace, to="0005")
        await migrate(db_url, namespace=fresh_namespace)
        columns = await _columns(store)
    finally:
        await store.aclose()
    assert sorted(columns) == ["plain", "retried"]
    for task_id, (stored, _, derived) in columns.items():
        assert stored == derived, task_id
    assert columns["retried"][0] > columns["plain"][0]  # its retry_at, after "plain"
