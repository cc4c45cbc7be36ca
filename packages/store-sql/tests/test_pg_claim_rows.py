"""PostgreSQL's ``claim_next`` and the rows it claims: the values it keeps, the rows it leaves.

The claim statement rewrites the claim's keys of the stored JSON text and leaves every
other value as it was: the user's values read back exactly, down to the spelling of their
numbers. Rows it cannot handle (past the delivery limit, not JSON at all, stored in the
layout or before the column of an older version) go to the claim decided in Python, which
lays them out anew. Also: the isolation a claim runs at whatever the server's default, and
the worker's re-read of a claim it held (``worker_snapshot``), one statement on the driver.
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
from _pg_claim_kit import stored_snapshot as _before
from _pg_claim_kit import stored_text as _stored_text
from conftest import Opener
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import LeaseLost, ManualClock, TaskStatus, rules
from tasks_store_sql import SQLStore, _codec

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
    before = await _stored_text(store, task.id)

    got = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1)

    assert [c.snapshot.id for c in got] == [task.id]
    after = await _stored_text(store, task.id)
    assert after != before  # it was written by the claim statement

    def kept(text: str) -> dict[str, Any]:
        return {k: v for k, v in _spelled(text).items() if k not in _codec.HEAD_KEYS}

    assert kept(after) == kept(before)
    for snapshot in (got[0].snapshot, await store.get(task.id, tenant=None)):
        value = snapshot.work.input
        assert value == TRICKY_INPUT
        assert type(value["huge"]) is float
        assert type(value["big"]) is float
        assert math.copysign(1.0, value["minus_zero"]) == -1.0


async def test_a_record_that_is_not_json_sends_the_claim_down_the_locked_path(
    store: SQLStore, clock: ManualClock
) -> None:
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
    assert await _stored_text(store, ids[0]) == "{not json tasks-corrupt"


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


async def test_the_statement_claims_rows_laid_out_by_the_codec_alone(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row the codec wrote is claimed by the statement (no claim in Python), whatever
    its values spell — ``"id"`` keys and quotes in the input, a progress message that
    looks like the end of the head."""
    tricky = {**TRICKY_INPUT, "deep": {"x": 1, "id": "a", "q": ',"id":"'}}
    task = await store.create(new_task(input=tricky))
    first = (await store.claim_next("w-old", LEASE_S, queues=["default"], limit=1))[0]
    await store.report_progress(first.lease, 50.0, ',"id":"x"}')
    clock.advance(LEASE_S + 1)
    _python_claims_refused(store, monkeypatch)

    await _claim_matches_the_rules(store, clock, task.id)
    again = await store.get(task.id, tenant=None)
    assert again.work.input == tricky


async def test_rows_of_an_older_version_are_claimed_in_python_and_laid_out_anew(
    store: SQLStore, clock: ManualClock
) -> None:
    """Text in another key order (every version before the head layout), text whose head
    holds the claim's keys alone (the versions before the completion statement) and a
    row without a delivery limit column (stored before migration 0004) are claimed
    exactly as the rules say, by the claim in Python, whose write lays the row out for
    the statement."""
    old_layout = await store.create(new_task())
    clock.advance(1)
    claim_head = await store.create(new_task())
    clock.advance(1)
    no_limit = await store.create(new_task())
    before = await _before(store, old_layout.id)
    await _rewrite(store, old_layout.id, snapshot=before.model_dump_json())
    claims_only = await _before(store, claim_head.id)
    head = claims_only.model_dump_json(include=set(_codec.CLAIM_KEYS))
    rest = claims_only.model_dump_json(exclude=set(_codec.CLAIM_KEYS))
    await _rewrite(store, claim_head.id, snapshot=head[:-1] + "," + rest[1:])
    await _rewrite(store, no_limit.id, max_deliveries=None)
    clock.advance(1)

    await _claim_matches_the_rules(store, clock, old_layout.id)
    await _claim_matches_the_rules(store, clock, claim_head.id)
    await _claim_matches_the_rules(store, clock, no_limit.id)
    assert (await _stored_text(store, claim_head.id)).startswith('{"status":')

    t = store.tables.tasks
    async with store._db.engine.connect() as conn:
        limits = (await conn.execute(
            sa.select(t.c.max_deliveries).where(t.c.id.in_([old_layout.id, no_limit.id]))
        )).scalars().all()
    assert limits == [before.work.max_deliveries] * 2


async def test_a_head_with_a_key_of_another_version_goes_to_the_claim_in_python(
    store: SQLStore, clock: ManualClock
) -> None:
    """A head holding anything but the head's keys is not rewritten by the statement
    (which would drop the key): the claim in Python decides on the whole text."""
    task = await store.create(new_task())
    text = await _stored_text(store, task.id)
    odd = text.replace('{"status":"pending",', '{"status":"pending","retry_count":0,', 1)
    assert odd != text
    assert _codec.decode_snapshot(task.id, odd) == await _before(store, task.id)
    await _rewrite(store, task.id, snapshot=odd)
    clock.advance(1)

    await _claim_matches_the_rules(store, clock, task.id)


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
