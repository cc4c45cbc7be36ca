"""The record of the event that completed a run lives in the task's row (``final_event``,
``_codec.final_record``), not in a ``task_events`` row: written so by every write path
(PostgreSQL's completion statement, the transaction decided in Python on every
dialect), read back as applied by ``history`` and by the replay check, and gone with a
new run of the id. Other records stay rows. Migration 0010 moves stored completions into
their rows and back, up, down and up with tasks in it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import Opener
from tasks_contract_tests._kit import (
    ALICE,
    LEASE_S,
    access,
    created_and_claimed,
    finished_task,
    new_task,
)
from tasks_core import (
    Completed,
    EventIdReused,
    InputRequested,
    InputResponsesAccepted,
    ManualClock,
    Snapshot,
    TaskStatus,
    rules,
)
from tasks_core.events import EventRecord
from tasks_store_sql import SQLStore, _codec, migrate

pytestmark = pytest.mark.anyio

RESULTS: list[Any] = [None, {"ok": True, "id": "x"}, [1.5, 2**70, "é\u0001"], "text"]


async def _stored_events(store: SQLStore, task_id: str) -> list[str]:
    ev = store.tables.events
    async with store.engine.connect() as conn:
        found = await conn.execute(sa.select(ev.c.event_id).where(ev.c.task_id == task_id)
                                   .order_by(ev.c.revision))
        return [str(event_id) for event_id in found.scalars()]


async def _final_event(store: SQLStore, task_id: str) -> str | None:
    t = store.tables.tasks
    async with store.engine.connect() as conn:
        found = await conn.execute(sa.select(t.c.final_event).where(t.c.id == task_id))
        value = found.scalar()
        return None if value is None else str(value)


@pytest.mark.parametrize("result", RESULTS, ids=["none", "object", "numbers", "text"])
@pytest.mark.parametrize("decided", ["as-claimed", "in-python"])
async def test_a_completion_is_kept_in_its_row_and_reads_back_as_applied(
    any_opener: Opener, closing: Any, result: Any, decided: str
) -> None:
    """A completion writes no history row on any dialect, whichever path writes it (on
    PostgreSQL ``as-claimed`` is the completion statement; with the claim's snapshot
    forgotten, the transaction); ``history`` ends with its record, a replay is a
    duplicate with that record, and the id sent with other content is refused."""
    store: SQLStore = closing(await any_opener(clock=ManualClock()))
    task, lease = await created_and_claimed(store)
    if decided == "in-python":
        store.decoded.pop(task.id)
    event = Completed(event_id="done", result=result)
    done = await store.transition(task.id, task.revision, event, lease)
    assert done.outcome == "applied"
    assert done.record is not None
    assert await _stored_events(store, task.id) == []
    assert await _final_event(store, task.id) == "done"
    assert await store.history(task.id, tenant=None) == [done.record]
    again = await store.transition(task.id, task.revision, event, lease)
    assert (again.outcome, again.record) == ("duplicate", done.record)
    with pytest.raises(EventIdReused):
        await store.transition(task.id, task.revision,
                               Completed(event_id="done", result="other"), lease)


async def test_earlier_records_stay_rows_before_the_final_one(
    any_opener: Opener, closing: Any
) -> None:
    """A run that asked for input and then completed: the question and the answer are
    history rows, the completion is the row's; ``history`` gives all three in order."""
    store: SQLStore = closing(await any_opener(clock=ManualClock()))
    task, lease = await created_and_claimed(store)
    asked = await store.transition(task.id, 0, InputRequested(event_id="ask", key="k"), lease)
    answered = await store.transition(task.id, 1, InputResponsesAccepted(
        event_id="answer", responses={"k": 1}), access(ALICE))
    done = await store.transition(task.id, 2, Completed(event_id="done"), lease)
    assert await _stored_events(store, task.id) == ["ask", "answer"]
    history = await store.history(task.id, tenant=None)
    assert history == [asked.record, answered.record, done.record]
    assert [r.revision for r in history] == [1, 2, 3]


@pytest.mark.parametrize("end", ["failed", "cancelled"])
async def test_other_endings_keep_their_history_row(
    any_opener: Opener, closing: Any, end: str
) -> None:
    """A failure or a cancel is not derived from the row: its record is a history row
    and the row holds no final event."""
    store: SQLStore = closing(await any_opener(clock=ManualClock()))
    finished = await finished_task(store, end)
    assert await _stored_events(store, finished.id) == ["finish"]
    assert await _final_event(store, finished.id) is None
    [record] = await store.history(finished.id, tenant=None)
    assert record.kind == end


async def test_a_new_run_of_the_id_starts_without_the_final_record(
    any_opener: Opener, closing: Any
) -> None:
    """Replacing a completed task by a new run clears the row's final event: the new
    run's history is empty and its own completion is its only record."""
    store: SQLStore = closing(await any_opener(clock=ManualClock()))
    finished = await finished_task(store, "completed")
    again = await store.create(new_task(id=finished.id), replace=finished)
    assert await _final_event(store, finished.id) is None
    assert await store.history(finished.id, tenant=None) == []
    claim = await store.claim(again.id, "w2", LEASE_S)
    done = await store.transition(again.id, again.revision,
                                  Completed(event_id="finish"), claim.lease)
    assert await store.history(finished.id, tenant=None) == [done.record]


@pytest.mark.parametrize("result", RESULTS, ids=["none", "object", "numbers", "text"])
def test_the_row_gives_back_every_completion_the_rules_record(result: Any) -> None:
    """``_codec.final_record`` of the snapshot a ``completed`` event leaves is that
    event's record, whatever the result (``kept_in_row`` holds); a record it would not
    give back (another kind, another revision) is not kept in the row."""
    now = datetime(2030, 1, 1, tzinfo=UTC)
    started = rules.new_snapshot(new_task(), now)
    applied = rules.apply_event(started, Completed(event_id="e", result=result), now)
    assert applied is not None
    snapshot, record = applied
    assert _codec.final_record(snapshot, "e") == record
    assert _codec.kept_in_row(snapshot, record)
    assert not _codec.kept_in_row(snapshot, record.model_copy(update={"revision": 5}))
    assert not _codec.kept_in_row(started, record)


async def _stored_records(url: str, namespace: str) -> dict[str, list[EventRecord]]:
    """Every history row of the namespace, by task (read with the tables' own types)."""
    store = SQLStore(url, namespace=namespace, schema="check")
    ev = store.tables.events
    try:
        async with store.engine.connect() as conn:
            rows = await conn.execute(sa.select(ev.c.task_id, ev.c.record)
                                      .order_by(ev.c.task_id, ev.c.revision))
            found: dict[str, list[EventRecord]] = {}
            for task_id, text in rows:
                found.setdefault(task_id, []).append(_codec.decode_record(task_id, text))
            return found
    finally:
        await store.aclose()


async def test_migration_0010_goes_up_down_and_up_with_tasks_in_it(
    db_url: str, fresh_namespace: str
) -> None:
    """Down to 0009, each completion is a history row again, exactly the record the
    store read; up again, the rows stand for them once more and ``history`` reads the
    same; a failure's and a running task's rows are left as they were."""
    clock = ManualClock()
    await migrate(db_url, namespace=fresh_namespace)
    store = await SQLStore.open(db_url, namespace=fresh_namespace, clock=clock)
    try:
        tasks: list[Snapshot] = []
        for result in RESULTS:
            task, lease = await created_and_claimed(store)
            clock.advance(0.5)
            done = await store.transition(task.id, 0, Completed(event_id="c", result=result),
                                          lease)
            tasks.append(done.snapshot)
        tasks.append(await finished_task(store, "failed"))
        running, _ = await created_and_claimed(store)
        ids = [t.id for t in tasks] + [running.id]
        before = {i: await store.history(i, tenant=None) for i in ids}
        assert [await _final_event(store, t.id) for t in tasks[:-1]] == ["c"] * len(RESULTS)

        await migrate(db_url, namespace=fresh_namespace, to="0009")
        stored = await _stored_records(db_url, fresh_namespace)
        assert {i: stored.get(i, []) for i in ids} == before

        await migrate(db_url, namespace=fresh_namespace)
        assert {i: await store.history(i, tenant=None) for i in ids} == before
        for t in tasks[:-1]:
            assert await _stored_events(store, t.id) == []
            assert await _final_event(store, t.id) == "c"
        assert await _stored_events(store, tasks[-1].id) == ["finish"]
        assert (await store.get(running.id, tenant=None)).status == TaskStatus.RUNNING
    finally:
        await store.aclose()
