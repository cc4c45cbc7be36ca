"""PostgreSQL's ``claim_next`` and the rows it claims: the values it keeps, the rows it leaves.

The claim statement writes the claim's columns and never the body: the user's values read
back exactly, down to the spelling of their numbers. Rows past the delivery limit, or
stored before the column of an older version, go to the claim decided in Python; a body
that is not JSON costs only its own task. Also: the isolation a claim runs at whatever the
server's default, and the worker's re-read of a claim it held (``worker_snapshot``), one
statement on the driver.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from _pg_claim_kit import WORKER
from _pg_claim_kit import claim_matches_the_rules as _claim_matches_the_rules
from _pg_claim_kit import refuse_python_claims as _python_claims_refused
from _pg_claim_kit import rewrite_row as _rewrite
from _stored_kit import stored_row as _stored_row
from conftest import Opener
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import LeaseLost, ManualClock, TaskStatus, rules
from tasks_store_sql import SQLStore

pytestmark = pytest.mark.anyio


TRICKY_INPUT: dict[str, Any] = {
    "huge": 1e300,
    "big": 1e20,
    "tiny": 5e-324,
    "minus_zero": -0.0,
    "integer": 2**100,
    "text": 'é\u2028"quoted" \\ /',
    "nested": [1.5, {"a": None, "b": [True, False]}],
}


def _spelled(text: str) -> dict[str, Any]:
    """A JSON document with every number kept as it is written."""
    document = json.loads(text, parse_float=lambda s: ("float", s), parse_int=lambda s: ("int", s))
    assert isinstance(document, dict)
    return document


async def test_a_claim_keeps_every_other_value_as_it_was_written(
    store: SQLStore, clock: ManualClock
) -> None:
    task = await store.create(new_task(input=TRICKY_INPUT))
    before = await _stored_row(store, task.id)

    got = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1)

    assert [c.snapshot.id for c in got] == [task.id]
    after = await _stored_row(store, task.id)
    assert after != before  # it was written by the claim statement
    assert after.body == before.body  # byte for byte
    assert _spelled(after.body)["work"] == _spelled(before.body)["work"]
    for snapshot in (got[0].snapshot, await store.get(task.id, tenant=None)):
        value = snapshot.work.input
        assert value == TRICKY_INPUT
        assert type(value["huge"]) is float
        assert type(value["big"]) is float
        assert math.copysign(1.0, value["minus_zero"]) == -1.0


async def test_a_record_that_is_not_json_costs_only_its_own_task(
    store: SQLStore, clock: ManualClock
) -> None:
    """The statement claims a row whose body is not JSON (it reads no body), the claim
    does not decode and is left to its lease, logged; the other tasks are served."""
    ids = []
    for _ in range(3):
        ids.append((await store.create(new_task())).id)
        clock.advance(1)
    t = store.tables.tasks
    async with store._db.engine.begin() as conn:
        await conn.execute(
            sa.update(t).where(t.c.id == ids[0]).values(snapshot="{not json tasks-corrupt")
        )

    got = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=5)

    assert [c.snapshot.id for c in got] == ids[1:]
    assert (await _stored_row(store, ids[0])).body == "{not json tasks-corrupt"


async def test_a_task_past_its_delivery_limit_is_failed_by_the_next_claim(
    store: SQLStore, clock: ManualClock
) -> None:
    spent = await store.create(new_task(max_deliveries=1))
    clock.advance(1)
    fresh = await store.create(new_task())
    await store.claim_next("w-old", LEASE_S, queues=["default"], limit=1)
    clock.advance(LEASE_S + 1)

    got = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=5)

    assert [c.snapshot.id for c in got] == [fresh.id]
    failed = await store.get(spent.id, tenant=None)
    assert failed.status == TaskStatus.FAILED
    assert failed.error is not None
    assert failed.error.type == rules.DELIVERY_LIMIT_ERROR


async def test_a_stricter_default_isolation_gets_an_explicit_read_committed_claim(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore]
) -> None:
    """Every operation runs at READ COMMITTED whatever the server default: where a
    statement on its own would run at another level, the claim takes a transaction."""
    settings = {"default_transaction_isolation": "serializable"}
    store = closing(await postgres_opener(
        engine_options={"connect_args": {"server_settings": settings}}
    ))
    tasks = [await store.create(new_task()) for _ in range(3)]

    got = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=5)

    assert sorted(c.snapshot.id for c in got) == sorted(t.id for t in tasks)
    assert list(store._db._read_committed.values()) == [False]


async def test_the_statement_claims_rows_whatever_their_values_spell(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row is claimed by the statement (no claim in Python), whatever its values spell
    — ``"id"`` keys and quotes in the input, a progress message that looks like JSON —
    and a recovered lease's progress cleared."""
    tricky = {**TRICKY_INPUT, "deep": {"x": 1, "id": "a", "q": ',"id":"'}}
    task = await store.create(new_task(input=tricky))
    first = (await store.claim_next("w-old", LEASE_S, queues=["default"], limit=1))[0]
    await store.report_progress(first.lease, 50.0, ',"id":"x"}')
    clock.advance(LEASE_S + 1)
    _python_claims_refused(store, monkeypatch)

    await _claim_matches_the_rules(store, clock, task.id)
    again = await store.get(task.id, tenant=None)
    assert again.work.input == tricky


async def test_a_row_without_a_delivery_limit_column_is_claimed_in_python(
    store: SQLStore, clock: ManualClock
) -> None:
    """A row stored before migration 0004 (no delivery limit in its column) is left by
    the statement to the claim in Python, exactly as the rules say, whose write stores
    the limit for the statement."""
    no_limit = await store.create(new_task())
    await _rewrite(store, no_limit.id, max_deliveries=None)
    clock.advance(1)

    await _claim_matches_the_rules(store, clock, no_limit.id)

    t = store.tables.tasks
    async with store._db.engine.connect() as conn:
        limit = (await conn.execute(
            sa.select(t.c.max_deliveries).where(t.c.id == no_limit.id))).scalar()
    assert limit == no_limit.work.max_deliveries


async def test_worker_snapshot_is_one_read_on_the_driver_and_reads_as_the_sql_path(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker reads each claim it held a while again before starting it: on PostgreSQL
    one statement on the driver, which answers as the SQL path does — the snapshot, or
    ``LeaseLost`` for a lease that is no longer the task's."""
    task = await store.create(new_task())
    claim = (await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1))[0]
    clock.advance(1)
    sent: list[str] = []
    run_driver = store._db.run_driver

    async def counting(operation: Any, **options: Any) -> Any:
        async def counted(driver: Any) -> Any:
            fetchrow = driver.fetchrow

            async def fetching(sql: str, *args: Any) -> Any:
                sent.append(sql)
                return await fetchrow(sql, *args)

            class Driver:
                def __getattr__(self, name: str) -> Any:
                    return fetching if name == "fetchrow" else getattr(driver, name)

            return await operation(Driver())

        return await run_driver(counted, **options)

    monkeypatch.setattr(store._db, "run_driver", counting)
    read = await store.worker_snapshot(claim.lease)

    assert len(sent) == 1
    assert read == await SQLStore._worker_snapshot(store, claim.lease)
    assert read.id == task.id
    assert read.claim == claim.snapshot.claim
    await store.release(claim.lease)
    with pytest.raises(LeaseLost):
        await store.worker_snapshot(claim.lease)
