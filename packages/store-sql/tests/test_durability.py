"""Restart durability: a reopened SQLite file or a reconnected server keeps everything."""

from __future__ import annotations

import pytest
from tasks_core import (
    Access,
    Completed,
    InputRequested,
    InputResponsesAccepted,
    ManualClock,
    NewTask,
    Owner,
    TaskQuery,
    TaskStatus,
    Work,
)
from tasks_store_sql import SQLStore

pytestmark = pytest.mark.anyio

ALICE = Owner("alice")
OWNER = Access(principal=ALICE, visibility="watchers")


async def test_a_reopened_store_keeps_tasks_history_and_replays(
    db_url: str, fresh_namespace: str
) -> None:
    """After the store is closed and opened again on a new engine (a process restart),
    every task, snapshot, history record and lease MUST read back exactly, and replaying
    an applied event MUST answer ``duplicate`` with the original revision and commit time.

    Troubleshooting: everything a store decides must be in the database, not in the
    store object: tokens in their column, instants at millisecond resolution in UTC.
    """
    clock = ManualClock()
    first = await SQLStore.open(db_url, namespace=fresh_namespace, clock=clock)
    try:
        await first.create(
            NewTask(id="job", tenant="default", owner=ALICE, work=Work(name="j", input=[1]))
        )
        await first.create(NewTask(id="open", tenant="default", owner=ALICE, work=Work(name="j")))
        [held] = await first.claim_next("w1", 30, queues=["default"])
        ask = InputRequested(event_id="ask", key="k", request={"q": "ok?"})
        await first.transition("job", 0, ask, held.lease)
        await first.release(held.lease)
        clock.advance(1)
        answer = InputResponsesAccepted(event_id="answer", responses={"k": True})
        await first.transition("job", 1, answer, OWNER)
        [again] = await first.claim_next("w2", 30, queues=["default"])
        clock.advance(1)
        done = Completed(event_id="done", result={"é": "ü"})
        applied = await first.transition("job", 2, done, again.lease)
        [running] = await first.claim_next("w3", 30, queues=["default"])
        before = (
            await first.list(TaskQuery(tenant=None)),
            await first.history("job", tenant=None),
        )
    finally:
        await first.aclose()

    second = await SQLStore.open(db_url, namespace=fresh_namespace, clock=clock)
    try:
        after = (
            await second.list(TaskQuery(tenant=None)),
            await second.history("job", tenant=None),
        )
        assert before == after
        assert [TaskStatus.COMPLETED, TaskStatus.RUNNING] == [s.status for s in after[0]]
        replay = await second.transition("job", 0, done, again.lease)
        assert "duplicate" == replay.outcome
        assert applied.record == replay.record
        assert running.snapshot == await second.worker_snapshot(running.lease)
        renewed = await second.renew(running.lease, 60)
        assert running.lease.generation == renewed.lease.generation
    finally:
        await second.aclose()
