"""PostgreSQL's one-statement ``create``: the same task as ``rules.new_snapshot`` at the
clock read after the creators' lock.

A new task is created by one statement, its own transaction (``Statements.create``): it
locks the creators' row, reads the clock, inserts only while the store stays within
``max_tasks`` and each tenant's bound leaves room below ``max_active_tasks_per_scope``,
and spells the clock's instants into snapshot text made in Python at a stand-in instant.
These tests hold what it stores to what the codec would write for the snapshot it
returns — on the injected clock (a whole second and not), with and without a TTL, on the
database's clock — and check that it leaves to the deciding transaction what it cannot
decide: a taken id, a store at a limit, a tenant that must be counted, a user's value
that spells the stand-in instant.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from _stored_kit import stored_as_projected, stored_row
from conftest import Opener
from tasks_contract_tests._kit import finished_task, new_task
from tasks_core import (
    CapacityExceeded,
    Completed,
    ManualClock,
    NewTask,
    Owner,
    Snapshot,
    TaskExists,
    TaskQuery,
    rules,
)
from tasks_store_sql import SQLStore
from tasks_store_sql._schema import COUNTER
from tasks_store_sql._stored import encode_body, instant_json
from tasks_store_sql.postgres import _creates as _pg

pytestmark = pytest.mark.anyio

IN_A, IN_B = Owner("alice", tenant="a"), Owner("bob", tenant="b")
IN_C = Owner("carol", tenant="c")


class Statements(list[list[Snapshot | None]]):
    """What each create statement returned, a list per statement (``None``: left to the
    transaction)."""

    def outcomes(self) -> list[Snapshot | None]:
        return [outcome for made in self for outcome in made]


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Statements:
    recorded = Statements()
    original = _pg.PostgresCreates.create_at_once

    async def recording(self: _pg.PostgresCreates, *args: Any) -> list[Snapshot | None]:
        made = await original(self, *args)
        recorded.append(made)
        return made

    monkeypatch.setattr(_pg.PostgresCreates, "create_at_once", recording)
    return recorded


async def _row(store: SQLStore, task_id: str) -> Any:
    t = store.tables.tasks
    async with store.engine.connect() as conn:
        found = await conn.execute(
            sa.select(t.c.snapshot, t.c.created_at, t.c.updated_at, t.c.expires_at,
                      t.c.status, t.c.row_version, t.c.run_at, t.c.available_at)
            .where(t.c.id == task_id)
        )
        return found.one()


async def _stored_as_returned(store: SQLStore, created: Snapshot) -> None:
    """The row holds exactly ``created``: the codec's body of it, and its columns (the
    head's as a new task's)."""
    row = await _row(store, created.id)
    assert row.snapshot == encode_body(created)
    assert await stored_row(store, created.id) == stored_as_projected(created)
    assert (row.created_at, row.updated_at, row.expires_at) == (
        created.created_at, created.updated_at, created.expires_at)
    assert (row.run_at, row.available_at) == (created.run_at, rules.available_at(created))
    assert (row.status, row.row_version) == ("pending", 0)


@pytest.mark.parametrize("start", [
    datetime(2030, 1, 1, tzinfo=UTC),  # a whole second: spelled without a fraction
    datetime(2030, 1, 1, 12, 30, 5, 239000, tzinfo=UTC),
])
@pytest.mark.parametrize("ttl_s", [None, 90.5])
async def test_a_new_task_is_stored_at_the_clock_in_one_statement(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore],
    statements: Statements, start: datetime, ttl_s: float | None,
) -> None:
    store = closing(await postgres_opener(clock=ManualClock(start)))
    created = await store.create(new_task(input={"at": "x"}, ttl_s=ttl_s))

    assert statements == [[created]]
    assert (created.created_at, created.updated_at) == (start, start)
    assert created.expires_at == (None if ttl_s is None else start + timedelta(seconds=ttl_s))
    await _stored_as_returned(store, created)
    assert await store.get(created.id, tenant="default") == created


async def test_on_the_database_clock_the_instants_are_the_databases(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore],
    statements: Statements,
) -> None:
    store = closing(await postgres_opener())
    before = await store.now()
    created = await store.create(new_task(ttl_s=60))
    after = await store.now()

    assert statements == [[created]]
    assert before <= created.created_at <= after
    assert created.expires_at == created.created_at + timedelta(seconds=60)
    await _stored_as_returned(store, created)


@pytest.fixture
def spelled() -> str:
    """A string that spells the instant the statement's snapshots are made at."""
    return instant_json(_pg._STAND_IN).strip('"')


async def test_a_value_that_spells_the_stand_in_is_stored_as_given_by_the_statement(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    statements: Statements, spelled: str,
) -> None:
    """The body holds no instant of the clock's, so nothing in it is replaced."""
    store = closing(await postgres_opener(clock=clock))

    created = await store.create(new_task(input={"when": spelled}))

    assert statements == [[created]]
    assert created.work.input == {"when": spelled}
    assert created.created_at == clock.now()
    assert await store.get(created.id, tenant="default") == created
    assert len(await store.list(TaskQuery(tenant=None))) == 1


async def test_a_taken_id_and_a_full_store_are_refused_by_the_transaction(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    statements: Statements,
) -> None:
    store = closing(await postgres_opener(clock=clock, max_tasks=2))
    first = await store.create(new_task("a"))
    with pytest.raises(TaskExists):
        await store.create(new_task("a"))
    await store.create(new_task("b"))
    with pytest.raises(CapacityExceeded):
        await store.create(new_task("c"))

    # (the first create of a store with a limit starts the count: the transaction's)
    assert [outcome is not None for outcome in statements.outcomes()] == [False, False, True, False]
    assert [s.id for s in await store.list(TaskQuery(tenant=None))] == ["a", "b"]
    assert await store.get("a", tenant="default") == first


async def test_a_store_without_limits_follows_a_count_another_store_started(
    postgres_opener: Opener, postgres_url: str, closing: Callable[[SQLStore], SQLStore],
    statements: Statements,
) -> None:
    """A store without limits creates by the uncounted statement while nothing is
    counted. Once a store with a limit has started the count, the first create of the
    store without limits finds it there: the statement writes nothing and the transaction
    creates and counts the task; its creates after that are the counting statement's, and
    each is counted.

    Troubleshooting: ``PostgresCreates.create_at_once`` picks the statement by the mode
    the last one read (``_counted``).
    """
    free = closing(await postgres_opener())
    await free.create(new_task("a"))
    limited = closing(SQLStore(postgres_url, namespace=free.namespace, max_tasks=10))
    await limited.create(new_task("b"))
    for task_id in "cde":
        await free.create(new_task(task_id))

    created = [None if s is None else s.id for s in statements.outcomes()]
    assert created == ["a", None, None, "d", "e"]  # b and c: the transaction's
    locks = free.tables.locks
    async with free.engine.connect() as conn:
        count = (await conn.execute(
            sa.select(locks.c.value).where(locks.c.name == COUNTER))).scalar_one()
    assert count == 5


async def test_a_tenant_is_counted_by_the_transaction_and_bounded_after(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    statements: Statements,
) -> None:
    """Once the store holds as many tasks as a tenant may have active, the statement
    cannot tell whether a tenant without a bound is full: the transaction counts it and
    stores its bound, and the next creates of that tenant are the statement's again —
    until the bound reaches the limit; then the transaction counts (and refuses)."""
    store = closing(await postgres_opener(clock=clock, max_active_tasks_per_scope=3))
    for n in range(4):
        await finished_task(store, id=f"done{n}", owner=IN_B)
    statements.clear()
    made = [await store.create(new_task(f"a{n}", owner=IN_A)) for n in range(3)]
    with pytest.raises(CapacityExceeded):
        await store.create(new_task("a3", owner=IN_A))

    assert statements.outcomes() == [None, made[1], made[2], None]
    for snapshot in made:
        await _stored_as_returned(store, snapshot)


@pytest.mark.parametrize("end", ["finished", "expired"])
async def test_tasks_no_longer_active_are_counted_out_when_the_bound_is_reached(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    statements: Statements, end: str,
) -> None:
    """A bound only grows with creates; tasks that finished or expired since are counted
    out when it reaches the limit: the transaction counts, and creates again."""
    store = closing(await postgres_opener(clock=clock, max_active_tasks_per_scope=2))
    for n in range(2):
        await store.create(new_task(f"old{n}", owner=IN_A, ttl_s=10))
    for n in range(2):
        if end == "finished":
            claimed = await store.claim(f"old{n}", "w1", 30)
            await store.transition(f"old{n}", claimed.snapshot.revision,
                                   Completed(event_id="done"), claimed.lease)
    clock.advance(11 if end == "expired" else 0)
    statements.clear()
    created = await store.create(new_task("new0", owner=IN_A))
    again = await store.create(new_task("new1", owner=IN_A))
    with pytest.raises(CapacityExceeded):
        await store.create(new_task("new2", owner=IN_A))

    assert statements.outcomes() == [None, again, None]
    await _stored_as_returned(store, created)
    await _stored_as_returned(store, again)


async def _gathered(store: SQLStore, news: list[NewTask], warm: str = "warm") -> list[Any]:
    """Create ``news`` at once, after a first create (so each create goes straight to the
    statements, without waiting to open the store): the first of them leads a statement
    of its own, and the rest, arriving while it runs, make the next one together."""
    await store.create(new_task(warm))
    return await asyncio.gather(*(store.create(new) for new in news), return_exceptions=True)


async def test_creates_that_arrive_together_are_made_by_one_statement(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    statements: Statements,
) -> None:
    store = closing(await postgres_opener(clock=clock))
    news = [new_task(f"t{i}", queue=f"q{i % 2}", ttl_s=60 * i or None,
                     watchers=(Owner(f"w{i}"),), input={"i": i}) for i in range(6)]
    made = await _gathered(store, news)

    assert statements[1:] == [made[:1], made[1:]]
    for created in made:
        await _stored_as_returned(store, created)
    for i, created in enumerate(made):
        seen = await store.list(TaskQuery(tenant="default", principal=Owner(f"w{i}")))
        assert [s.id for s in seen] == [created.id]  # each task's watcher, and no other


async def test_every_queue_of_a_group_is_woken(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore],
) -> None:
    store = closing(await postgres_opener())
    assert not await store.wait_for_work(["a", "b"], 0.01)  # listening from here on
    await _gathered(store, [new_task(queue=queue) for queue in "aab"])

    assert await store.wait_for_work(["a"], 30)
    assert await store.wait_for_work(["b"], 30)


async def test_an_id_twice_in_a_group_is_created_once_and_refused_once(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    statements: Statements,
) -> None:
    store = closing(await postgres_opener(clock=clock))
    lead, once, twice = await _gathered(
        store, [new_task("lead"), new_task("same", input=1), new_task("same", input=2)]
    )

    assert isinstance(twice, TaskExists)
    assert statements.outcomes()[1:] == [lead, once, None]
    assert (await store.get("same", tenant="default")).work.input == 1


async def test_a_group_that_would_pass_a_limit_is_left_to_the_transaction(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    statements: Statements,
) -> None:
    """Four tasks may be stored; with two stored, a group of three would pass that, so
    the statement creates none of it, and the transaction creates two and refuses one."""
    store = closing(await postgres_opener(clock=clock, max_tasks=4))
    outcomes = await _gathered(store, [new_task(f"t{i}") for i in range(4)])

    assert statements.outcomes()[1:] == [outcomes[0], None, None, None]
    assert [type(o) for o in outcomes].count(CapacityExceeded) == 1
    stored = {s.id for s in await store.list(TaskQuery(tenant=None))}
    assert stored == {"warm", *(o.id for o in outcomes if isinstance(o, Snapshot))}
    assert len(stored) == 4


async def test_a_group_that_would_fill_a_tenant_is_left_to_the_transaction(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    statements: Statements,
) -> None:
    """Three tasks of one tenant may be active: a group with two more of a tenant whose
    bound is two is left to the transaction (which creates one and refuses one); a group
    whose tenants have room is not."""
    store = closing(await postgres_opener(clock=clock, max_active_tasks_per_scope=3))
    await store.create(new_task("b0", owner=IN_B))
    await store.create(new_task("b1", owner=IN_B))
    statements.clear()
    crowded = await _gathered(store, [new_task("lead1", owner=IN_A),
                                      new_task("b2", owner=IN_B), new_task("b3", owner=IN_B)])
    assert statements.outcomes()[2:] == [None, None]
    assert [type(o) for o in crowded[1:]].count(CapacityExceeded) == 1

    store = closing(await postgres_opener(clock=clock, max_active_tasks_per_scope=10))
    statements.clear()
    roomy = await _gathered(store, [new_task("lead2", owner=IN_A),
                                    new_task("c0", owner=IN_C), new_task("c1", owner=IN_C)])
    assert statements.outcomes()[1:] == roomy
    for snapshot in roomy:
        await _stored_as_returned(store, snapshot)


async def test_in_a_group_a_task_that_spells_the_stand_in_is_made_by_the_statement(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    statements: Statements, spelled: str,
) -> None:
    store = closing(await postgres_opener(clock=clock))
    made = await _gathered(store, [
        new_task("lead"), new_task("spells", input=[spelled]), new_task("plain")
    ])

    assert statements.outcomes()[1:] == made
    for created in made:
        assert await store.get(created.id, tenant="default") == created
        await _stored_as_returned(store, created)


async def test_delayed_tasks_of_a_group_are_made_by_the_statement_at_its_clock(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock,
    statements: Statements,
) -> None:
    """A delay is a shift after the clock the statement reads (``run_at``, ``available_at``
    and a TTL counted from ``run_at``), a delay of 0 spells the creation once more; a task
    given an instant ``run_at`` (clamped to that clock) is left to the transaction."""
    store = closing(await postgres_opener(clock=clock))
    news = [new_task("t0", delay_s=0), new_task("t1", delay_s=2.5, ttl_s=60),
            new_task("t2", delay_s=1), new_task("t3", run_at=clock.now())]
    made = await _gathered(store, news)

    assert [s is not None for s in statements.outcomes()[1:]] == [True, True, True, False]
    for created, delay in zip(made, (0, 2.5, 1, 0), strict=True):
        assert created.run_at == created.created_at + timedelta(seconds=delay)
        await _stored_as_returned(store, created)
    assert made[1].expires_at == made[1].created_at + timedelta(seconds=62.5)
