"""Status listings past their walk (``_listing``): the same pages, read from the indexes.

A listing by status walks at most ``store.walk`` rows in id order past its cursor and
reads what lies past that fence from the indexes holding the rows of its statuses when
fewer than ``store.candidates`` rows are stored with them, else walks on
(``ListOps._held``). Whichever way a page is read, it is the first ``limit`` matching
tasks after the cursor in id order: every status (the derived ones too: scheduled,
running, claimed, a lapsed lease read as pending), with queue and tenant filters, paged
with several limits, against the listing of every task filtered here. The walk is cut to
two rows so that the indexes serve most of each page, and the candidates to three so that
the walk on serves some. The reads past
the fence use the status's indexes: pending the claim and lease indexes, running the
lease index, completed the counts index, and the count that tells whether the statuses
are rare there the counts index alone (plans asked as in ``test_index_plans.py``, among a
crowd of other tasks; PostgreSQL's for the values sent).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from conftest import Opener
from tasks_contract_tests._kit import ALICE, LEASE_S, new_task
from tasks_core import (
    Cancelled,
    Completed,
    Failed,
    InputRequested,
    ManualClock,
    Owner,
    Snapshot,
    TaskQuery,
    TaskStatus,
)
from tasks_core.authority import Access
from tasks_store_sql import SQLStore
from tasks_store_sql._schema import LISTED
from test_counts_index import _vacuumed
from test_index_plans import _assert_uses, _reading, captured

pytestmark = pytest.mark.anyio

S = TaskStatus
LAYOUT = "ccpcccsrhwfccxlcccpcepcfcccchccxcrcwccsclcp"
"""The tasks in id order, one letter each: p pending, s scheduled, r running, h claimed
(held), w waiting for input, c completed, f failed, x cancelled, l a lapsed lease (reads
pending), e expired (reads as missing)."""
BOB = Owner("bob", "acme")
CROWD = 100
"""Tasks of another tenant waiting for input, below the layout's ids: enough that the
index of every active task (pending or waiting) costs more than the claim and lease
indexes."""
COUNTS = "ix_tasks_counts"
FILTERS = [
    *({status} for status in S),
    {S.PENDING, S.COMPLETED},
    {S.COMPLETED, S.FAILED, S.CANCELLED},
    {S.RUNNING, S.CLAIMED},
    {S.PENDING, S.SCHEDULED},
    set(S) - {S.COMPLETED},
]


async def _laid_out(store: SQLStore, clock: ManualClock) -> None:
    """The tasks of :data:`LAYOUT`, ids in its order, in queues ``a`` and ``b`` in turn
    (claimed ones in ``held``, the only queue ``claim_next`` holds them from), every third
    of tenant ``acme``."""
    for n, kind in enumerate(LAYOUT):
        queue = "held" if kind == "h" else "ab"[n % 2]
        owner = BOB if n % 3 == 0 else ALICE
        task = new_task(f"t{n:03d}", owner=owner, queue=queue, delay_s=60 if kind == "s" else None,
                        ttl_s=1 if kind == "e" else None)
        created = await store.create(task)
        if kind in "pse":
            continue
        if kind == "h":
            [held] = await store.claim_next("w", LEASE_S, queues=["held"], start=0)
            assert held.snapshot.status == S.CLAIMED
            continue
        claim = await store.claim(created.id, "w", 1.0 if kind == "l" else LEASE_S)
        event: Any = {"w": InputRequested(event_id="e", key="k"), "c": Completed(event_id="e"),
                      "f": Failed(event_id="e", error="Boom")}.get(kind)
        if kind == "x":
            await store.transition(created.id, claim.snapshot.revision, Cancelled(event_id="e"),
                                   Access(principal=owner, visibility="watchers"))
        elif event is not None:
            await store.transition(created.id, claim.snapshot.revision, event, claim.lease)
    clock.advance(2)  # the lapsed lease lapses, the expired task expires


async def _paged(store: SQLStore, query: TaskQuery) -> list[str]:
    """Every id of ``query``, page after page (a short page is the last)."""
    ids: list[str] = []
    after = None
    while True:
        page = await store.list(query.model_copy(update={"after": after}))
        ids += [task.id for task in page]
        if len(page) < query.limit:
            return ids
        after = page[-1].id


def _kept(every: list[Snapshot], statuses: set[TaskStatus], queue: str | None,
          tenant: str | None) -> list[str]:
    return [task.id for task in every if task.status in statuses
            and queue in (None, task.queue) and tenant in (None, task.tenant)]


@pytest.mark.parametrize("candidates", [3, 100])
async def test_status_listings_past_the_walk_read_the_same_pages(
    any_opener: Opener, closing: Callable[[SQLStore], SQLStore], candidates: int
) -> None:
    clock = ManualClock()
    store = closing(await any_opener(clock=clock))
    await _laid_out(store, clock)
    every = await store.list(TaskQuery(tenant=None, limit=1000))
    assert {task.status for task in every} == set(S)
    assert len(every) == len(LAYOUT) - 1  # the expired task is gone
    store.walk, store.candidates = 2, candidates
    walked_on = 0
    statement = store._statement

    def spied(kind: str, query: TaskQuery, after: bool) -> Any:
        nonlocal walked_on
        walked_on += kind == "listing" and not (query.statuses or set()) <= set(LISTED)
        return statement(kind, query, after)

    store._statement = spied  # type: ignore[method-assign]
    with captured(store) as sent:
        for statuses in FILTERS:
            for queue in (None, "a"):
                for tenant in (None, "acme"):
                    for limit in (1, 3):
                        query = TaskQuery(tenant=tenant, queue=queue, limit=limit,
                                          statuses=frozenset(statuses))
                        assert _kept(every, statuses, queue, tenant) == await _paged(
                            store, query), (statuses, queue, tenant, limit)
    if candidates == 3:  # more rows stored with most statuses: the walk goes on
        assert walked_on > 0
    else:  # none as many: every page read past the walk from the indexes
        assert walked_on == 0
        assert any("AS found" in sql for sql, _ in sent), "no page was read past the walk"


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest) -> Opener:
    """SQLite and PostgreSQL, whose partial indexes hold the rows of a few statuses each
    (MariaDB's indexes hold every row: its status index serves any status in id order)."""
    found: Opener = request.getfixturevalue(f"{request.param}_opener")
    return found


async def _postgres_scans(store: SQLStore, sql: str, params: Any) -> list[tuple[str, str]]:
    """The index scans ``(index, condition)`` of PostgreSQL's plan of ``sql`` for these
    ``params`` (a custom plan, as a listing gets: a generic one takes a comparison with an
    unknown instant for a third of the rows, however few an index holds), on fresh
    statistics with sequential scans off, in a transaction rolled back."""
    async with store.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        transaction = driver.transaction()
        await transaction.start()
        try:
            await driver.execute("ANALYZE")
            await driver.execute("SET LOCAL enable_seqscan = off")
            plan = await driver.fetchval("EXPLAIN (FORMAT JSON) " + sql, *params)
        finally:
            await transaction.rollback()
    scans: list[tuple[str, str]] = []

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            assert "Seq Scan" != node.get("Node Type"), node
            if "Index Name" in node:
                scans.append((node["Index Name"], node.get("Index Cond", "")))
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(json.loads(plan) if isinstance(plan, str) else plan)  # the driver's codec may
    return scans


STORED_PENDING = ["ix_tasks_claim", "ix_tasks_lease", "ix_tasks_active"]


@pytest.mark.parametrize(("status", "indexes", "any_of"), [
    (S.PENDING, ["ix_tasks_claim", "ix_tasks_lease"], STORED_PENDING),
    (S.RUNNING, ["ix_tasks_lease"], STORED_PENDING),
    (S.COMPLETED, [COUNTS], [COUNTS]),
])
async def test_reads_past_the_walk_use_the_indexes_holding_the_status(
    opener: Opener, closing: Callable[[SQLStore], SQLStore], status: TaskStatus,
    indexes: list[str], any_of: list[str],
) -> None:
    """SQLite reads the indexes of ``_held``; PostgreSQL picks among the indexes holding
    the rows by their cost (the index of active tasks holds every stored pending row too)
    and reads the primary key only to join the rows found, never from the fence on."""
    clock = ManualClock()
    store = closing(await opener(clock=clock))
    for task in await store.create_many([new_task(f"s{n:03d}", owner=None, tenant="crowd")
                                         for n in range(CROWD)]):
        claim = await store.claim(task.id, "w", LEASE_S)
        await store.transition(task.id, 0, InputRequested(event_id="e", key="k"), claim.lease)
    await _laid_out(store, clock)
    store.walk = 2
    with captured(store) as sent:
        assert await store.list(TaskQuery(tenant=None, statuses=frozenset({status})))
    await _vacuumed(store)
    past, rarity = _reading(sent, store, "AS found"), _reading(sent, store, "count(")
    if store.engine.dialect.name != "postgresql":
        await _assert_uses(store, indexes, past)
        await _assert_uses(store, COUNTS, rarity)
        return
    prefix = store.tables.prefix
    for sql, params in past:
        scans = await _postgres_scans(store, sql, params)
        assert {prefix + name for name in any_of} & {name for name, _ in scans}, scans
        key = f"{store.tables.tasks.name}_pkey"
        assert all(">" not in cond for name, cond in scans if name == key), scans
    for sql, params in rarity:
        assert {prefix + COUNTS} == {name for name, _ in await _postgres_scans(
            store, sql, params)}
