"""PostgreSQL's one-statement ``claim_next``: the same claim as ``rules.start_claim``.

On PostgreSQL ``claim_next`` is a single statement that locks the candidates, reads the
clock after the locks and writes the claim's columns of each row in SQL
(``tasks_store_sql.postgres._claim_sql``). These tests hold it to the rules: what it stores
and returns is exactly what ``rules.start_claim`` decides from the snapshot before the claim
(every field, a recovered lease, progress and a due retry cleared, ``started_at`` kept,
claims past ``start`` held, a delayed task at its ``run_at``), column for column as the
codec writes it, and the body never rewritten.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from _pg_claim_kit import WORKER
from _pg_claim_kit import claim_matches_the_rules as _claim_matches_the_rules
from _pg_claim_kit import refuse_python_claims as _python_claims_refused
from _stored_kit import stored_as_projected as _projected
from _stored_kit import stored_row as _stored_row
from _stored_kit import stored_snapshot as _before
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import ManualClock, RetryPolicy, RetryRequested, TaskStatus, rules
from tasks_store_sql import SQLStore

pytestmark = pytest.mark.anyio


async def test_a_fresh_claim_is_what_start_claim_decides(
    store: SQLStore, clock: ManualClock
) -> None:
    task = await store.create(new_task(input={"n": 1}))
    clock.advance(2)
    await _claim_matches_the_rules(store, clock, task.id)


async def test_a_recovered_lease_keeps_started_at_and_clears_progress(
    store: SQLStore, clock: ManualClock
) -> None:
    task = await store.create(new_task())
    first = (await store.claim_next("w-old", LEASE_S, queues=["default"], limit=1))[0]
    clock.advance(1)
    await store.report_progress(first.lease, 0.5, "half way")
    clock.advance(LEASE_S + 1)  # the first lease expires without ending

    before = await _before(store, task.id)
    assert before.progress is not None
    assert before.started_at is not None
    await _claim_matches_the_rules(store, clock, task.id)
    after = await store.get(task.id, tenant=None)
    assert after.claim is not None
    assert after.claim.recovered
    assert after.started_at == before.started_at
    assert after.deliveries == 2


async def test_a_due_retry_clears_retry_at(store: SQLStore, clock: ManualClock) -> None:
    task = await store.create(new_task(retry=RetryPolicy.fixed(5.0, attempts=3)))
    first = (await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1))[0]
    retried = await store.transition(
        task.id, first.snapshot.revision, RetryRequested(event_id="r1", error="Boom"), first.lease
    )
    assert retried.snapshot.retry_at is not None
    assert await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1) == []
    clock.advance(6)
    await _claim_matches_the_rules(store, clock, task.id)


async def test_new_and_released_tasks_are_claimed_together_oldest_first(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A released task and a new one are claimed by the statement together, the
    oldest first."""
    released = await store.create(new_task())
    first = (await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1))[0]
    await store.release(first.lease)
    clock.advance(1)
    new = await store.create(new_task())
    clock.advance(1)
    expected = {}
    for task_id in (released.id, new.id):
        before = await _before(store, task_id)
        expected[task_id], _, _, _ = rules.start_claim(
            before, WORKER, LEASE_S, rules.tick(clock.now()))
    _python_claims_refused(store, monkeypatch)

    got = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=5)

    assert [c.snapshot.id for c in got] == [released.id, new.id]
    for claim in got:
        assert await _before(store, claim.snapshot.id) == expected[claim.snapshot.id]


async def test_claims_past_start_are_held_by_the_statements_as_the_rules_say(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``claim_next(start=1)`` of a released task and two new ones: the statement writes
    the claims (no claim in Python), the first started and the others held, each stored
    column for column as ``rules.start_claim(held=...)`` decides."""
    released = await store.create(new_task())
    first = (await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1))[0]
    await store.release(first.lease)
    clock.advance(1)
    new = [await store.create(new_task()) for _ in range(2)]
    clock.advance(1)
    ids = [released.id, *(task.id for task in new)]
    now = rules.tick(clock.now())
    expected = {}
    for rank, task_id in enumerate(ids):
        expected[task_id], _, _, _ = rules.start_claim(
            await _before(store, task_id), WORKER, LEASE_S, now, held=rank > 0)
    _python_claims_refused(store, monkeypatch)

    got = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=3, start=1)

    assert [c.snapshot.id for c in got] == ids
    assert [c.snapshot.status for c in got] == [
        TaskStatus.RUNNING, TaskStatus.CLAIMED, TaskStatus.CLAIMED]
    for task_id in ids:
        assert await _before(store, task_id) == expected[task_id]
        assert await _stored_row(store, task_id) == _projected(expected[task_id])


async def test_a_scheduled_task_is_claimed_by_the_statements_at_its_run_at(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delayed task is claimed by the statement once ``run_at`` has come (not a moment
    before), and a due retry of it too, which sets ``available_at`` back to ``run_at`` —
    each stored column for column as ``rules.start_claim`` decides."""
    task = await store.create(new_task(delay_s=5, retry=RetryPolicy.fixed(5.0, attempts=3)))
    clock.advance(4.999)
    assert await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1) == []
    clock.advance(0.001)
    _python_claims_refused(store, monkeypatch)
    await _claim_matches_the_rules_then_retry(store, clock, task.id)
    clock.advance(6)
    await _claim_matches_the_rules(store, clock, task.id)
    t = store.tables.tasks
    async with store._db.engine.connect() as conn:
        available = (await conn.execute(
            sa.select(t.c.available_at).where(t.c.id == task.id))).scalar()
    assert available == task.run_at


async def _claim_matches_the_rules_then_retry(
    store: SQLStore, clock: ManualClock, task_id: str
) -> None:
    """The claim is the rules' (as :func:`_claim_matches_the_rules` checks), then its
    holder asks for a retry."""
    before = await _before(store, task_id)
    now = rules.tick(clock.now())
    expected, _, _, _ = rules.start_claim(before, WORKER, LEASE_S, now)
    [claim] = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1)
    assert await _before(store, task_id) == expected
    assert await _stored_row(store, task_id) == _projected(expected)
    retried = await store.transition(task_id, claim.snapshot.revision,
                                     RetryRequested(event_id="r1", error="Boom"), claim.lease)
    assert retried.snapshot.retry_at is not None
