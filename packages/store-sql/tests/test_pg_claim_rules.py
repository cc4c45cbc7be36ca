"""PostgreSQL's one-statement ``claim_next``: the same claim as ``rules.start_claim``.

On PostgreSQL ``claim_next`` is a single statement that locks the candidates, reads the
clock after the locks and rewrites the claim's keys of each stored snapshot in SQL
(``tasks_store_sql.postgres._claim_sql``). These tests hold it to the rules: what it stores
and returns is exactly what ``rules.start_claim`` decides from the snapshot before the claim
(every field, a recovered lease, progress and a due retry cleared, ``started_at`` kept,
claims past ``start`` held, a delayed task at its ``run_at``), whether the statement of new
tasks (the fresh head) or the one that takes a stored head apart writes it.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from _pg_claim_kit import WORKER
from _pg_claim_kit import claim_matches_the_rules as _claim_matches_the_rules
from _pg_claim_kit import head_and_rest as _split
from _pg_claim_kit import refuse_python_claims as _python_claims_refused
from _pg_claim_kit import rewrite_row as _rewrite
from _pg_claim_kit import stored_snapshot as _before
from _pg_claim_kit import stored_text as _stored_text
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import Completed, ManualClock, RetryPolicy, RetryRequested, TaskStatus, rules
from tasks_store_sql import SQLStore, _codec
from tasks_store_sql.postgres import _claim_sql as _pg_claim
from tasks_store_sql.postgres._statements import one_queue

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


async def _fresh(store: SQLStore, clock: ManualClock) -> dict[str, bool]:
    """Which claimable rows the claim statement would claim by the fresh form (by id) at
    the store clock."""
    locked = _pg_claim._locked(store.tables, one_queue(store.tables.tasks))
    query = sa.select(locked.c.id, _pg_claim._fresh(locked)).params(
        now=rules.tick(clock.now()), limit=100, queue="default")
    async with store._db.engine.begin() as conn:
        rows = (await conn.execute(query)).all()
        await conn.rollback()  # the candidates' locks
    return {task_id: bool(fresh) for task_id, fresh in rows}


async def test_a_new_task_is_claimed_by_the_fresh_form_exactly_as_the_rules_say(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every task the codec writes at creation begins with the fresh head, so its first
    claim writes the new head without taking the stored one apart — with a TTL and a
    retention, and with input whose keys spell the head's own (``started_at``,
    ``finished_at``, ``id``)."""
    spelling = {"started_at": None, "finished_at": None, "id": "x", "updated_at": "2026"}
    plain = await store.create(new_task())
    clock.advance(1)
    timed = await store.create(new_task(ttl_s=3600, retention_s=60, input=spelling))
    clock.advance(1)
    assert await _fresh(store, clock) == {plain.id: True, timed.id: True}
    _python_claims_refused(store, monkeypatch)

    await _claim_matches_the_rules(store, clock, plain.id)
    await _claim_matches_the_rules(store, clock, timed.id)
    assert (await store.get(timed.id, tenant=None)).work.input == spelling


async def test_a_claimed_released_or_replaced_task_is_not_fresh(
    store: SQLStore, clock: ManualClock
) -> None:
    """Only a task never claimed has the fresh head: a released task (one delivery, a
    lease generation) and a new run of a finished key (its lease generation kept) are
    claimed by taking the head apart."""
    released = await store.create(new_task())
    first = (await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1))[0]
    await store.release(first.lease)
    clock.advance(1)
    finished = await store.create(new_task())
    done = await store.claim(finished.id, WORKER, LEASE_S)
    ended = await store.transition(finished.id, done.snapshot.revision,
                                   Completed(event_id="done"), done.lease)
    clock.advance(1)
    again = await store.create(new_task(finished.id), replace=ended.snapshot)
    assert again.lease_generation == 1
    clock.advance(1)

    assert await _fresh(store, clock) == {released.id: False, finished.id: False}
    await _claim_matches_the_rules(store, clock, released.id)
    await _claim_matches_the_rules(store, clock, finished.id)


async def test_new_and_released_tasks_are_claimed_together_oldest_first(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The statement of new tasks only leaves a released task alone; the claim of any
    head takes it next, in the same ``claim_next``, which returns both oldest first."""
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


async def test_a_fresh_head_with_a_key_between_its_instants_is_taken_apart(
    store: SQLStore, clock: ManualClock
) -> None:
    """A head that begins like a fresh one but holds another key after its
    ``updated_at`` is not fresh: the fresh form would drop the key (here a later lease
    generation, which the decoded snapshot takes), so the claim decides on the whole
    text."""
    task = await store.create(new_task())
    text = await _stored_text(store, task.id)
    odd = text.replace(',"started_at":null,', ',"lease_generation":7,"started_at":null,', 1)
    assert odd != text
    await _rewrite(store, task.id, snapshot=odd)
    assert (await _before(store, task.id)).lease_generation == 7
    clock.advance(1)

    assert await _fresh(store, clock) == {task.id: False}
    await _claim_matches_the_rules(store, clock, task.id)
    assert (await store.get(task.id, tenant=None)).lease_generation == 8


async def test_claims_past_start_are_held_by_the_statements_as_the_rules_say(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``claim_next(start=1)`` of a released task and two new ones: both statements write
    the claims (no claim in Python), the first started and the others held, each stored
    byte for byte as ``rules.start_claim(held=...)`` lays it out."""
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
        assert _split(await _stored_text(store, task_id)) == _split(
            _codec.encode_snapshot(expected[task_id]))


async def test_a_scheduled_task_is_claimed_by_the_statements_at_its_run_at(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delayed task's text ends with ``,"run_at":"…"``, past the head: its first claim is
    the fresh statement's once ``run_at`` has come (not a moment before), and a due retry
    of it the statement's that takes heads apart, which sets ``available_at`` back to
    ``run_at`` — each stored byte for byte as ``rules.start_claim`` decides."""
    task = await store.create(new_task(delay_s=5, retry=RetryPolicy.fixed(5.0, attempts=3)))
    clock.advance(4.999)
    assert await _fresh(store, clock) == {}
    assert await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1) == []
    clock.advance(0.001)
    assert await _fresh(store, clock) == {task.id: True}
    _python_claims_refused(store, monkeypatch)
    await _claim_matches_the_rules_then_retry(store, clock, task.id)
    clock.advance(6)
    assert await _fresh(store, clock) == {task.id: False}
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
    assert _split(await _stored_text(store, task_id)) == _split(_codec.encode_snapshot(expected))
    retried = await store.transition(task_id, claim.snapshot.revision,
                                     RetryRequested(event_id="r1", error="Boom"), claim.lease)
    assert retried.snapshot.retry_at is not None
