"""Races across separate engines (as separate processes would run them): exactly one
winner, never two owners, never a blocked claimer."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core import (
    Access,
    Cancelled,
    CapacityExceeded,
    Completed,
    ManualClock,
    NewTask,
    Owner,
    RevisionConflict,
    TaskQuery,
    Unavailable,
    Work,
)
from tasks_store_sql import SQLStore
from tasks_store_sql._schema import COUNTER

pytestmark = pytest.mark.anyio

ALICE = Owner("alice")
ENGINES = 4


def _new(task_id: str) -> NewTask:
    return NewTask(id=task_id, tenant="default", owner=ALICE, work=Work(name="job"))


@pytest.fixture
async def stores(db_url: str, fresh_namespace: str) -> AsyncIterator[list[SQLStore]]:
    """Stores on one namespace, each with its own engine (and connections)."""
    clock = ManualClock()
    opened = [
        await SQLStore.open(db_url, namespace=fresh_namespace, clock=clock)
        for _ in range(ENGINES)
    ]
    yield opened
    for store in opened:
        await store.aclose()


async def _outcomes(calls: list[Any]) -> list[Any]:
    return list(await asyncio.gather(*calls, return_exceptions=True))


async def test_exact_claim_from_several_engines_has_one_winner(stores: list[SQLStore]) -> None:
    """Claims of one task from several engines at once MUST give exactly one lease; the
    others MUST be refused with ``Unavailable``."""
    await stores[0].create(_new("t"))
    results = await _outcomes([s.claim("t", f"w{i}", 30) for i, s in enumerate(stores)])
    kinds = Counter(type(r).__name__ for r in results)
    assert {"Claim": 1, "Unavailable": ENGINES - 1} == dict(kinds)
    assert 1 == (await stores[0].get("t", tenant=None)).deliveries


async def test_terminal_writes_from_several_engines_have_one_winner(
    stores: list[SQLStore],
) -> None:
    """A completion by the lease holder racing cancels from other engines at one revision
    MUST apply exactly one event; the others MUST raise ``RevisionConflict``."""
    await stores[0].create(_new("t"))
    held = await stores[0].claim("t", "w0", 30)
    owner = Access(principal=ALICE, visibility="watchers")
    calls = [stores[0].transition("t", 0, Completed(event_id="done"), held.lease)]
    calls += [
        s.transition("t", 0, Cancelled(event_id=f"cancel{i}"), owner)
        for i, s in enumerate(stores[1:])
    ]
    results = await _outcomes(calls)
    applied = [r for r in results if not isinstance(r, BaseException)]
    assert 1 == len(applied)
    assert all(isinstance(r, RevisionConflict) for r in results if r not in applied)
    history = await stores[0].history("t", tenant=None)
    assert [applied[0].record] == history


async def test_one_event_sent_from_two_engines_is_applied_once(stores: list[SQLStore]) -> None:
    """The same event sent at once through two engines MUST be applied once; the other
    MUST answer ``duplicate`` with the same revision and commit time."""
    await stores[0].create(_new("t"))
    held = await stores[0].claim("t", "w0", 30)
    done = Completed(event_id="done", result=1)
    first, second = await asyncio.gather(
        stores[1].transition("t", 0, done, held.lease),
        stores[2].transition("t", 0, done, held.lease),
    )
    assert ["applied", "duplicate"] == sorted([first.outcome, second.outcome])
    assert first.record == second.record
    assert 1 == len(await stores[0].history("t", tenant=None))


async def test_claim_next_from_several_engines_never_shares_a_task(
    stores: list[SQLStore],
) -> None:
    """Workers on separate engines draining one queue MUST claim every task exactly
    once."""
    ids = {f"t{i:03d}" for i in range(40)}
    for task_id in sorted(ids):
        await stores[0].create(_new(task_id))

    async def drain(store: SQLStore, worker: str) -> list[str]:
        got: list[str] = []
        while batch := await store.claim_next(worker, 30, queues=["default"], limit=3):
            got += [c.snapshot.id for c in batch]
        return got

    batches = await asyncio.gather(*(drain(s, f"w{i}") for i, s in enumerate(stores)))
    claimed = [task_id for batch in batches for task_id in batch]
    assert {} == {k: n for k, n in Counter(claimed).items() if n > 1}
    assert ids == set(claimed)


async def test_capacity_holds_for_creators_on_several_engines(
    db_url: str, fresh_namespace: str
) -> None:
    """Creators on separate engines MUST together store no more than ``max_tasks``."""
    stores = [
        await SQLStore.open(db_url, namespace=fresh_namespace, max_tasks=5) for _ in range(3)
    ]
    try:
        results = await _outcomes(
            [s.create(_new(f"t{i}-{n}")) for i, s in enumerate(stores) for n in range(4)]
        )
        refused = [r for r in results if isinstance(r, CapacityExceeded)]
        assert (5, 7) == (len(results) - len(refused), len(refused))
        assert 5 == len(await stores[0].list(TaskQuery(tenant=None)))
    finally:
        for store in stores:
            await store.aclose()


async def test_claim_next_skips_a_row_another_session_holds(
    stores: list[SQLStore],
) -> None:
    """``claim_next`` MUST NOT wait for a row another session holds locked: it takes the
    next claimable task (``FOR UPDATE SKIP LOCKED``).

    Troubleshooting: SQLite has no row locks (writers take turns), so this is a server
    database test.
    """
    store = stores[0]
    if store.dialect == "sqlite":
        pytest.skip("SQLite serializes writers; there are no row locks to skip")
    await store.create(_new("oldest"))
    stores[0]._clock.advance(1)  # type: ignore[union-attr]
    await store.create(_new("next"))
    tasks = store.tables.tasks
    async with stores[1].engine.connect() as other, other.begin():
        locked = sa.select(tasks.c.id).where(tasks.c.id == "oldest").with_for_update()
        assert "oldest" == (await other.execute(locked)).scalar()
        got = await asyncio.wait_for(store.claim_next("w1", 30, queues=["default"]), 10)
        assert ["next"] == [c.snapshot.id for c in got]
    [later] = await store.claim_next("w1", 30, queues=["default"])
    assert "oldest" == later.snapshot.id


async def test_unavailable_is_what_losers_of_an_exact_claim_hear(stores: list[SQLStore]) -> None:
    """A second exact claim after the first committed MUST be ``Unavailable`` on any
    engine (the winner's lease is visible to every connection at once)."""
    await stores[0].create(_new("t"))
    await stores[0].claim("t", "w0", 30)
    for store in stores[1:]:
        with pytest.raises(Unavailable):
            await store.claim("t", "w1", 30)


_LOCK_WAITERS = {
    # sessions of this database (other than the asking one) waiting for a lock on a
    # statement that names ``:table``
    "postgresql": (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND query LIKE :table AND pid <> pg_backend_pid()"
    ),
    "mysql": (
        "SELECT count(*) FROM information_schema.processlist WHERE command = 'Query' "
        "AND info LIKE :table AND info LIKE '%%FOR UPDATE%%' AND id <> connection_id()"
    ),
}

T = TypeVar("T")


async def _waiting_for_a_held_row(
    store: SQLStore, table: sa.Table, where: sa.ColumnElement[bool], write: Awaitable[T],
    hold: Callable[[AsyncConnection], Awaitable[object]] | None = None,
) -> tuple[T, datetime]:
    """Run ``write`` while another session holds the row of ``table`` that ``where``
    finds (locked by ``hold``, if given, in that session's open transaction); what
    ``write`` returned, and an instant read on the database's clock while it waited for
    that row (a millisecond after it was seen waiting)."""
    async with store.engine.connect() as blocker, store.engine.connect() as monitor:
        holding = await blocker.begin()
        if hold is None:
            await blocker.execute(sa.select(table).where(where).with_for_update())
        else:
            await hold(blocker)
        writer = asyncio.ensure_future(write)
        pattern = {"table": f"%{table.name}%"}
        for _ in range(1000):
            async with monitor.begin():  # statistics are a snapshot per transaction
                waiting = await monitor.execute(sa.text(_LOCK_WAITERS[store.dialect]), pattern)
                if waiting.scalar() or writer.done():
                    break
            await asyncio.sleep(0.01)
        assert not writer.done(), "the write did not wait for the row lock"
        first = await store.now()
        while (during := await store.now()) <= first:  # a later millisecond, still held
            pass
        await holding.commit()
        return await asyncio.wait_for(writer, 10), during


_ROW_LOCKS_ONLY = ("SQLite locks the whole file (BEGIN IMMEDIATE), not rows; its clock "
                   "is read after that lock in Python (Database.now)")


@pytest.mark.parametrize("claimed_by", ["claim", "claim_next"])
async def test_time_is_read_after_the_row_lock_is_held(
    db_url: str, fresh_namespace: str, claimed_by: str
) -> None:
    """A write that waits for a row lock another session holds MUST read the database
    clock after it gets the lock (docs/design.md, Time): its commit time is not earlier than
    an instant read, on the database clock, while it was still waiting — for a run
    claimed exactly and one claimed by ``claim_next`` (on PostgreSQL its completion is
    the completion statement).

    Troubleshooting: read ``clock_timestamp()`` (not ``now()``, the transaction's start)
    in the statement that locks the rows, in the projection over the locked rows — or in
    a statement after it (``_pg_complete``: the ``MATERIALIZED`` CTE over the locked rows).
    """
    store = await SQLStore.open(db_url, namespace=fresh_namespace)  # the database's clock
    try:
        if store.dialect == "sqlite":
            pytest.skip(_ROW_LOCKS_ONLY)
        await store.create(_new("t"))
        if claimed_by == "claim":
            held = await store.claim("t", "w1", 300)
        else:
            [held] = await store.claim_next("w1", 300, queues=["default"], limit=1)
        tasks = store.tables.tasks
        done, during = await _waiting_for_a_held_row(store, tasks, tasks.c.id == "t", (
            store.transition("t", held.snapshot.revision, Completed(event_id="done"),
                             held.lease)
        ))
        assert done.record is not None
        assert done.record.committed_at >= during
    finally:
        await store.aclose()


async def test_creation_time_is_read_after_the_creators_lock_is_held(
    db_url: str, fresh_namespace: str
) -> None:
    """A create waiting for the creators' row (held by another creator; a store with a
    limit, whose creates take it) MUST read the database clock after it gets it: its
    ``created_at`` is not earlier than an instant read while it waited — so the creates
    that hold the row are created in the order of their ``created_at``, the order claims
    take them in.

    Troubleshooting: on PostgreSQL the one-statement create reads the clock in a
    ``MATERIALIZED`` CTE over the locked creators' row (``postgres._create_sql._created``).
    """
    store = await SQLStore.open(db_url, namespace=fresh_namespace,  # the database's clock
                                max_tasks=10**9)  # (a limit: creates hold the row)
    try:
        if store.dialect == "sqlite":
            pytest.skip(_ROW_LOCKS_ONLY)
        locks = store.tables.locks
        created, during = await _waiting_for_a_held_row(
            store, locks, locks.c.name == COUNTER, store.create(_new("t"))
        )
        assert created.created_at >= during
        assert await store.get("t", tenant="default") == created
    finally:
        await store.aclose()


async def test_a_create_that_waits_for_another_creator_counts_its_tasks(
    db_url: str, fresh_namespace: str
) -> None:
    """A create that waits for the creators' row while another creator holds it MUST see
    that creator's tasks once it gets the row: with one task left below
    ``max_active_tasks_per_scope`` and the other creator taking it, the waiting create
    is refused — though the store holds more tasks than the limit, so the tenant's
    active tasks must be known, and a count in a statement that began before the wait
    would not see the other creator's task (PostgreSQL reads other rows as of a
    statement's start).

    Troubleshooting: decide on what was read after the lock — rows locked after it, or a
    count in a statement of its own (``_scopes``, ``postgres._create_sql._scopes``).
    """
    store = await SQLStore.open(db_url, namespace=fresh_namespace,
                                max_active_tasks_per_scope=2)
    try:
        if store.dialect == "sqlite":
            pytest.skip(_ROW_LOCKS_ONLY)
        for n in range(3):  # more stored tasks than the limit: the tenant must be counted
            await store.create(_new(f"o{n}").model_copy(update={"tenant": f"other{n}"}))
        await store.create(_new("a1"))
        locks = store.tables.locks

        async def take_the_last_place(blocker: AsyncConnection) -> None:
            await store.create(_new("a2"), transaction=blocker)

        with pytest.raises(CapacityExceeded):
            await _waiting_for_a_held_row(
                store, locks, locks.c.name == COUNTER, store.create(_new("a3")),
                hold=take_the_last_place,
            )
        active = await store.list(TaskQuery(tenant="default"))
        assert sorted(s.id for s in active) == ["a1", "a2"]
    finally:
        await store.aclose()
