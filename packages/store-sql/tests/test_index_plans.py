"""The partial indexes of ``tasks`` serve the queries they were made for.

PostgreSQL and SQLite keep each index of ``tasks`` to the rows its queries look for
(``_schema.task_indexes``: pending tasks for claims, unended leases for exclusive queues,
tasks with an expiry for the reaper, active tasks for the capacity count). A planner uses
a partial index only when it can prove the query's ``WHERE`` implies the index predicate
from what it sees: a status bound as a parameter proves nothing (PostgreSQL's generic
plan, SQLite at prepare time), and the query silently falls back to scanning the table.

Each test runs the store operation, captures the statements it sent that read ``tasks``
with the index's predicate, and asks the database for their plan with sequential scans
discouraged: the plan must name the partial index. PostgreSQL's hot-path statements
(prepared for asyncpg, not sent through SQLAlchemy) are explained directly, under the
generic plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import Opener
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.sql.expression import Executable
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import ManualClock, Owner, StoreLimits, rules
from tasks_core.storekit import QueueLimits, check_claim_next
from tasks_store_sql import PostgresStore, SQLStore
from tasks_store_sql.postgres._statements import MILLISECOND, join_list

pytestmark = pytest.mark.anyio

Captured = list[tuple[str, Any]]
CLAIMABLE = 60


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest) -> Opener:
    found: Opener = request.getfixturevalue(f"{request.param}_opener")
    return found


@pytest.fixture
async def store(opener: Opener, closing: Callable[[SQLStore], SQLStore]) -> SQLStore:
    """A store with a manual clock."""
    return closing(await opener(clock=ManualClock()))


class QueryPlan(Executable, ClauseElement):
    """SQLite's ``EXPLAIN QUERY PLAN`` of a statement, compiled with it."""

    inherit_cache = False

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement


@compiles(QueryPlan, "sqlite")
def _query_plan(element: QueryPlan, compiler: SQLCompiler, **kw: Any) -> str:
    return "EXPLAIN QUERY PLAN " + compiler.process(element.statement, **kw)


@compiles(QueryPlan, "mysql")
@compiles(QueryPlan, "mariadb")
def _explain(element: QueryPlan, compiler: SQLCompiler, **kw: Any) -> str:
    """MariaDB's ``EXPLAIN`` of a statement, compiled with it."""
    return "EXPLAIN " + compiler.process(element.statement, **kw)


@contextmanager
def captured(store: SQLStore) -> Iterator[Captured]:
    """What ``store`` sends through SQLAlchemy meanwhile: on SQLite and MariaDB the
    statements (as SQLAlchemy elements, to be explained), on PostgreSQL their SQL and
    parameters."""
    sent: Captured = []
    engine = store.engine.sync_engine

    def element(
        _conn: Any, clause: Any, multiparams: Any, params: Any, _options: Any
    ) -> None:
        values = dict(params or {})
        for given in multiparams or ():
            values.update(given)
        sent.append((str(clause.compile(dialect=engine.dialect)), (clause, values)))

    def cursor(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        sent.append((statement, params))

    event, hook = (("before_execute", element) if engine.dialect.name != "postgresql"
                   else ("before_cursor_execute", cursor))
    sa.event.listen(engine, event, hook)
    try:
        yield sent
    finally:
        sa.event.remove(engine, event, hook)


def _reading(sent: Captured, store: SQLStore, marker: str) -> Captured:
    table = store.tables.tasks.name
    found = [(sql, what) for sql, what in sent
             if sql.lstrip().upper().startswith("SELECT") and f"FROM {table}" in sql
             and marker in sql]
    assert found, f"no statement reading {table} with {marker!r} was sent"
    return found


async def _sqlite_uses(
    store: SQLStore, names: list[str], _: str, sent: Any
) -> str | None:
    """``None`` when SQLite's plan of the statement ``sent`` (with its values) reads every
    index of ``names``, else the plan."""
    statement, values = sent
    async with store.engine.connect() as conn:
        rows = await conn.execute(QueryPlan(statement), values)
        plan = "\n".join(str(row[-1]) for row in rows)
    return None if all(f"INDEX {name}" in plan for name in names) else plan


EVERY_ROW = "ix_tasks_counts"
"""The counts' index, over every row: on the few rows of a test it ties with the partial
index a query was made for (both cost next to nothing), so the plans asked for here are
made without it — dropped in the transaction that is rolled back — unless it is the one
asked for (``test_counts_index.py``)."""


def _ties(store: SQLStore, names: list[str]) -> list[str]:
    """The DDL that drops :data:`EVERY_ROW` unless it is among ``names``."""
    name = store.tables.prefix + EVERY_ROW
    if name in names:
        return []
    index = next(i for i in store.tables.tasks.indexes if i.name == name)
    return [str(sa.schema.DropIndex(index).compile(dialect=store.engine.dialect))]


async def _postgres_uses(
    store: SQLStore, names: list[str], sql: str, params: Any
) -> str | None:
    """``None`` when PostgreSQL's generic plan of ``sql`` scans every index of ``names``
    (the statement runs in a transaction rolled back afterwards, on fresh statistics with
    sequential scans discouraged, and the indexes' scan counters are read before and
    after)."""
    async with store.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        transaction = driver.transaction()
        await transaction.start()
        try:
            await driver.execute("ANALYZE")  # statistics of this moment, not of old runs
            await driver.execute("SET LOCAL enable_seqscan = off")
            for ddl in _ties(store, names):
                await driver.execute(ddl)
            await driver.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            counter = await driver.prepare("SELECT pg_stat_get_xact_numscans(to_regclass($1))")
            before = [await counter.fetchval(name) for name in names]  # unflushed included
            prepared = await driver.prepare(sql)  # named: planned by the plan cache
            await prepared.fetch(*params)
            after = [await counter.fetchval(name) for name in names]
        finally:
            await transaction.rollback()
    unused = [name for name, b, a in zip(names, before, after, strict=True) if a == b]
    return f"no scan of {', '.join(unused)} (generic plan)" if unused else None


async def _mariadb_plan(store: SQLStore, sent: Any) -> list[dict[str, Any]]:
    """MariaDB's ``EXPLAIN`` rows of the statement ``sent`` (with its values)."""
    statement, values = sent
    async with store.engine.connect() as conn:
        return [dict(row) for row in
                (await conn.execute(QueryPlan(statement), values)).mappings()]


async def _mariadb_uses(
    store: SQLStore, names: list[str], _: str, sent: Any
) -> str | None:
    """``None`` when MariaDB's plan of the statement ``sent`` reads every index of
    ``names``."""
    rows = await _mariadb_plan(store, sent)
    keys = {row["key"] for row in rows}
    return None if set(names) <= keys else "\n".join(str(dict(row)) for row in rows)


async def _assert_uses(
    store: SQLStore, indexes: str | list[str], statements: list[tuple[str, Any]]
) -> None:
    wanted = [indexes] if isinstance(indexes, str) else indexes
    names = [store.tables.prefix + index for index in wanted]
    uses = {"sqlite": _sqlite_uses, "postgresql": _postgres_uses}.get(
        store.engine.dialect.name, _mariadb_uses)
    for sql, params in statements:
        problem = await uses(store, names, sql, params)
        assert problem is None, f"{', '.join(wanted)} not all used by:\n{sql}\n{problem}"


CLAIM_INDEXES = ["ix_tasks_claim", "ix_tasks_lease"]
"""Unleased tasks (fresh, due retries, due delayed tasks), lapsed leases (``_candidates``)."""


@pytest.fixture(params=["sqlite", "postgres", "mariadb"])
def every_opener(request: pytest.FixtureRequest) -> Opener:
    found: Opener = request.getfixturevalue(f"{request.param}_opener")
    return found


async def _crowded(store: SQLStore, clock: ManualClock) -> None:
    """Tasks of another queue and tenant, enough that a scan in claim order is the plan to
    pick, and of the claimed queue tasks of three priorities, delayed tasks (one of them
    urgent), a retry pending and running tasks."""
    for _ in range(3):
        await store.create(new_task(queue="other"))
    for _ in range(CLAIMABLE):
        await store.create(new_task(owner=None, tenant="other"))
    for n in range(5):
        await store.create(new_task(delay_s=60 + n, priority=9 if n == 2 else 0))
    await store.create(new_task())
    for priority in (-3, 5, 5):
        await store.create(new_task(priority=priority))
    await store.claim_next("w0", LEASE_S, queues=["default"], limit=1)
    clock.advance(1)


async def test_claims_read_the_claim_index_in_claim_order_and_the_lease_index(
    every_opener: Opener, closing: Callable[[SQLStore], SQLStore]
) -> None:
    """The claim's candidates come from the claim index in claim order, ``(neg_priority,
    available_at, id)`` (no sort of what it holds: every key ascending, on MariaDB too),
    and from the lease index."""
    clock = ManualClock()
    store = closing(await every_opener(clock=clock))
    await _crowded(store, clock)
    if not isinstance(store, PostgresStore):
        with captured(store) as sent:
            await store.claim_next("w1", LEASE_S, queues=["default"], limit=2)
        reads = _reading(sent, store, "status = 'pending'")
        await _assert_uses(store, CLAIM_INDEXES, reads)
        await _assert_in_order(store, "ix_tasks_claim", reads)
        return
    fast = store
    tokens = join_list([rules.new_lease_token()])
    claims = [fast.claim_sql(one=True)]
    with captured(store) as sent:  # the second tier: the SQL store's claim
        await fast._claim_locked(check_claim_next("w1", LEASE_S, ["default"], 1, ()))
    reads = [
        *((claim.sql, tuple(claim.args(
            now=rules.tick(clock.now()), queue="default", limit=1, worker="w1",
            lease=rules.check_lease_for(LEASE_S) // MILLISECOND, tokens=tokens)))
          for claim in claims),
        *_reading(sent, store, "status = 'pending'"),
    ]
    await _assert_uses(store, CLAIM_INDEXES, reads)
    await _assert_in_order(store, "ix_tasks_claim", reads)


async def test_next_available_reads_the_waiting_index_past_now(
    every_opener: Opener, closing: Callable[[SQLStore], SQLStore]
) -> None:
    """``next_available`` reads the waiting index (retries and delayed tasks, by
    ``available_at`` whatever the priority) past ``now``, in its order: the earliest of
    the delayed tasks, not the urgent one."""
    clock = ManualClock()
    store = closing(await every_opener(clock=clock))
    await _crowded(store, clock)
    with captured(store) as sent:
        found = await store.next_available(["default"])
    assert found is not None
    assert 59 <= (found - clock.now()).total_seconds() <= 60
    reads = _reading(sent, store, "min(")
    await _assert_uses(store, "ix_tasks_waiting", reads)
    await _assert_in_order(store, "ix_tasks_waiting", reads)


async def _assert_in_order(
    store: SQLStore, index: str, statements: list[tuple[str, Any]]
) -> None:
    """Each statement reads ``index`` in its order: no sort of the rows it reads there
    (a sort of a branch's first ``limit`` rows, above its limit, is no sort of the
    table)."""
    name = store.tables.prefix + index
    check = {"sqlite": _sqlite_sorts, "postgresql": _postgres_sorts}.get(
        store.engine.dialect.name, _mariadb_sorts)
    for sql, params in statements:
        problem = await check(store, name, sql, params)
        assert problem is None, f"{index} read out of order by:\n{sql}\n{problem}"


async def _sqlite_sorts(store: SQLStore, name: str, _: str, sent: Any) -> str | None:
    statement, values = sent
    async with store.engine.connect() as conn:
        rows = [tuple(row) for row in await conn.execute(QueryPlan(statement), values)]
    plan = "\n".join(str(row[-1]) for row in rows)
    reads = [row[1] for row in rows if f"INDEX {name} " in str(row[-1])]
    sorted_there = [row for row in rows if row[1] in reads and "TEMP B-TREE" in str(row[-1])]
    return None if reads and not sorted_there else plan


async def _postgres_sorts(store: SQLStore, name: str, sql: str, params: Any) -> str | None:
    async with store.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        transaction = driver.transaction()
        await transaction.start()
        try:
            await driver.execute("ANALYZE")  # statistics of this moment, not of old tests
            await driver.execute("SET LOCAL enable_seqscan = off")
            for ddl in _ties(store, [store.tables.prefix + name]):
                await driver.execute(ddl)
            found = await driver.fetchval("EXPLAIN (FORMAT JSON) " + sql, *params)
        finally:
            await transaction.rollback()
    plan = (found if isinstance(found, list) else json.loads(found))[0]["Plan"]

    def sorted_reads(node: dict[str, Any], sorting: bool) -> tuple[bool, bool]:
        kind = node["Node Type"]
        sorting = "Sort" in kind or (sorting and kind != "Limit")
        read = node.get("Index Name") == name
        below = [sorted_reads(child, sorting) for child in node.get("Plans", [])]
        return (read or any(r for r, _ in below),
                (read and sorting) or any(s for _, s in below))

    read, sorted_ = sorted_reads(plan, False)
    return None if read and not sorted_ else json.dumps(plan, indent=1)


async def _mariadb_sorts(store: SQLStore, name: str, _: str, sent: Any) -> str | None:
    rows = await _mariadb_plan(store, sent)
    mine = [row for row in rows if row["key"] == name]
    sorted_ = [row for row in mine if "filesort" in str(row["Extra"] or "")]
    return None if mine and not sorted_ else "\n".join(str(dict(row)) for row in rows)


async def test_the_capacity_count_reads_the_active_index(
    opener: Opener, closing: Callable[[SQLStore], SQLStore]
) -> None:
    store = closing(await opener(limits=StoreLimits(max_active_tasks_per_scope=3)))
    for _ in range(3):
        await store.create(new_task())
    if not isinstance(store, PostgresStore):
        with captured(store) as sent:  # three stored: a create counts its tenant's
            await store.create(new_task(owner=Owner("carol", tenant="other")))
        await _assert_uses(store, "ix_tasks_active", _reading(sent, store, "status IN ("))
        return
    active = store.sql.active
    clock_now = rules.tick(ManualClock().now())
    await _assert_uses(store, "ix_tasks_active", [
        (active.sql, tuple(active.args(tenant="default", now=clock_now, id="x", cap=3))),
    ])


async def test_exclusive_queues_read_the_lease_index(store: SQLStore) -> None:
    await store.create(new_task(queue="serial"))
    with captured(store) as sent:
        await store.claim_next("w1", LEASE_S, queues=["serial"], limit=1, exclusive=["serial"])
    await _assert_uses(store, "ix_tasks_lease", _reading(sent, store, "claim_expires_at >"))


async def test_the_reaper_reads_the_expiry_index(store: SQLStore) -> None:
    await store.create(new_task(ttl_s=1))
    with captured(store) as sent:
        await store.reap(10)
    await _assert_uses(store, "ix_tasks_expires", _reading(sent, store, "expires_at <="))


async def test_queue_limits_count_through_the_lease_and_claim_log_indexes(
    every_opener: Opener, closing: Callable[[SQLStore], SQLStore]
) -> None:
    """A limited queue's live leases are counted in the lease index, its claims of the
    rate's window in the claim log's ``(queue, claimed_at)`` index."""
    clock = ManualClock()
    store = closing(await every_opener(clock=clock))
    await _crowded(store, clock)
    limits = {"default": QueueLimits(max_running=50, rate=(50, 60))}
    for _ in range(3):
        await store.claim_next("w0", LEASE_S, queues=["default"], limit=2, limits=limits)
        clock.advance(1)
    with captured(store) as sent:
        await store.claim_next("w1", LEASE_S, queues=["default"], limit=2, limits=limits)
    await _assert_uses(store, "ix_tasks_lease", _reading(sent, store, "claim_expires_at >"))
    log = store.tables.claims.name
    counts = [(sql, what) for sql, what in sent
              if sql.lstrip().upper().startswith("SELECT") and f"FROM {log}" in sql]
    assert counts, f"no statement reading {log} was sent"
    await _assert_uses(store, "ix_queue_claims", counts)
