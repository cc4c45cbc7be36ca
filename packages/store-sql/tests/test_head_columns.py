"""Migrations 0011 (the snapshot's head in columns and the body in the text) and 0013 (the
body without the keys the row holds anyway), up, down and up again with tasks in every
state — each reads the same after every step, the text down a step is what the release
before wrote, and the tasks carry on (claimed, completed) after the way back up.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from _stored_kit import stored_row
from tasks_contract_tests._kit import LEASE_S, created_and_claimed, finished_task, new_task
from tasks_core import (
    Completed,
    InputRequested,
    ManualClock,
    Owner,
    RetryPolicy,
    RetryRequested,
    Snapshot,
    TaskStatus,
)
from tasks_store_sql import SQLStore, _codec, migrate
from tasks_store_sql._schema import head_columns
from tasks_store_sql._stored import HEAD_KEYS, OUT_OF_BODY

pytestmark = pytest.mark.anyio

TRICKY: dict[str, Any] = {"big": 1e20, "text": 'é"\\ \u2028', "n": [1.5, 2**70, None]}


async def _every_state(store: SQLStore, clock: ManualClock) -> list[str]:
    """Tasks pending, delayed, claimed with progress, held, waiting for input, retried,
    completed (with a tricky result), failed and cancelled."""
    await store.create(new_task("pending", input=TRICKY))
    await store.create(new_task("delayed", delay_s=60))
    running, lease = await created_and_claimed(store, id="running")
    await store.report_progress(lease, 40.0, "é")
    await store.create(new_task("held", queue="h"))
    await store.claim_next("w2", LEASE_S, queues=["h"], start=0)
    asking, ask_lease = await created_and_claimed(store, id="asking", queue="q")
    await store.transition("asking", 0, InputRequested(event_id="a", key="k", request=TRICKY),
                           ask_lease)
    retried, retry_lease = await created_and_claimed(
        store, id="retried", queue="r", retry=RetryPolicy.fixed(30.0, attempts=3))
    await store.transition("retried", 0, RetryRequested(event_id="r", error="E"), retry_lease)
    done, done_lease = await created_and_claimed(store, id="done", queue="d")
    clock.advance(0.5)
    await store.transition("done", 0, Completed(event_id="c", result=TRICKY), done_lease)
    failed = await finished_task(store, "failed", queue="f")
    cancelled = await finished_task(store, "cancelled", queue="x")
    del running, asking, retried, done
    return ["pending", "delayed", "running", "held", "asking", "retried", "done", failed.id,
            cancelled.id]


async def _read(store: SQLStore, ids: list[str]) -> dict[str, Any]:
    return {i: (await store.get(i, tenant=None), await store.history(i, tenant=None))
            for i in ids}


async def test_migration_0011_goes_up_down_and_up_with_tasks_in_it(
    db_url: str, fresh_namespace: str
) -> None:
    clock = ManualClock()
    await migrate(db_url, namespace=fresh_namespace)
    store = await SQLStore.open(db_url, namespace=fresh_namespace, clock=clock)
    try:
        ids = await _every_state(store, clock)
        before = await _read(store, ids)
        rows = {i: await stored_row(store, i) for i in ids}
        snapshots = {i: _codec.decode_snapshot(i, rows[i]) for i in ids}

        await migrate(db_url, namespace=fresh_namespace, to="0010")
        t = store.tables.tasks
        async with store.engine.connect() as conn:
            texts = dict((await conn.execute(sa.select(t.c.id, t.c.snapshot))).all())
            columns = await conn.run_sync(
                lambda sync: {c["name"] for c in sa.inspect(sync).get_columns(t.name)})
        assert not columns & {c.name for c in head_columns()}
        for i in ids:  # the whole snapshot in the text again, its head first
            assert Snapshot.model_validate_json(texts[i]) == snapshots[i]
            assert list(json.loads(texts[i]))[:len(HEAD_KEYS)] == list(HEAD_KEYS)

        await migrate(db_url, namespace=fresh_namespace)
        assert await _read(store, ids) == before
        for i in ids:
            again = await stored_row(store, i)
            assert _codec.decode_snapshot(i, again) == snapshots[i]
            assert not set(json.loads(again.body)) & set(HEAD_KEYS)

        assert (await store.get("held", tenant=None)).status == TaskStatus.CLAIMED
        clock.advance(max(LEASE_S, 60) + 1)  # the running lease lapses; the delayed is due
        claims = await store.claim_next("w3", LEASE_S, queues=["default"], limit=5)
        assert sorted(c.snapshot.id for c in claims) == ["delayed", "pending", "running"]
        for claim in claims:
            ended = await store.transition(claim.snapshot.id, claim.snapshot.revision,
                                           Completed(event_id="end"), claim.lease)
            assert ended.snapshot.status == TaskStatus.COMPLETED
        asking = await store.get("asking", tenant=None)
        assert asking.input_requests == {"k": TRICKY}
    finally:
        await store.aclose()


async def test_migration_0013_goes_up_down_and_up_with_tasks_in_it(
    db_url: str, fresh_namespace: str
) -> None:
    """Down at 0012 each body is the snapshot but its head, as that release wrote it (the
    row's keys back in it); up again they are out, and every task reads as before."""
    clock = ManualClock()
    await migrate(db_url, namespace=fresh_namespace)
    store = await SQLStore.open(db_url, namespace=fresh_namespace, clock=clock)
    try:
        ids = await _every_state(store, clock)
        await store.create(new_task("nobody's", owner=None))
        await store.create(new_task("elsewhere", owner=Owner("carol", tenant="t2"), queue="e"))
        ids += ["nobody's", "elsewhere"]
        before = await _read(store, ids)
        snapshots = {i: _codec.decode_snapshot(i, await stored_row(store, i)) for i in ids}

        await migrate(db_url, namespace=fresh_namespace, to="0012")
        t = store.tables.tasks
        async with store.engine.connect() as conn:
            texts = dict((await conn.execute(sa.select(t.c.id, t.c.snapshot))).all())
        for i in ids:
            written = snapshots[i].model_dump_json(exclude=set(HEAD_KEYS), exclude_defaults=True)
            assert json.loads(texts[i]) == json.loads(written)

        await migrate(db_url, namespace=fresh_namespace)
        assert await _read(store, ids) == before
        for i in ids:
            again = await stored_row(store, i)
            assert _codec.decode_snapshot(i, again) == snapshots[i]
            assert not set(json.loads(again.body)) & OUT_OF_BODY
        claims = await store.claim_next("w3", LEASE_S, queues=["default", "e"], limit=5)
        assert sorted(c.snapshot.id for c in claims) == ["elsewhere", "nobody's", "pending"]
    finally:
        await store.aclose()
