"""PostgreSQL's one-statement ``claim_next``: the same claim as ``rules.start_claim``.

On PostgreSQL ``claim_next`` is a single statement that locks the candidates, reads the
clock after the locks and rewrites the claim's keys of each stored snapshot in SQL
(``tasks_store_sql.postgres._claim_sql``), leaving every other value of the JSON text as it
was. These
tests hold it to the rules: what it stores and returns is exactly what
``rules.start_claim`` decides from the snapshot before the claim (every field, a
recovered lease, progress and a due retry cleared, ``started_at`` kept); the user's
values read back exactly, down to the spelling of their numbers; and rows it cannot
handle (past the delivery limit, not JSON at all, stored in the layout or before the
column of an older version) go to the claim decided in Python, which lays them out anew.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import Opener
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import (
    Completed,
    LeaseLost,
    ManualClock,
    RetryPolicy,
    RetryRequested,
    Snapshot,
    TaskStatus,
    rules,
)
from tasks_store_sql import SQLStore, _codec
from tasks_store_sql.postgres import _claim_sql as _pg_claim
from tasks_store_sql.postgres._statements import one_queue

pytestmark = pytest.mark.anyio

WORKER = "w-claims"


@pytest.fixture
def store(pg_store: SQLStore) -> SQLStore:
    """A store on PostgreSQL with the manual ``clock``."""
    return pg_store


async def _stored_text(store: SQLStore, task_id: str) -> str:
    t = store.tables.tasks
    async with store._db.engine.connect() as conn:
        text = (await conn.execute(sa.select(t.c.snapshot).where(t.c.id == task_id))).scalar()
    assert isinstance(text, str)
    return text


async def _before(store: SQLStore, task_id: str) -> Snapshot:
    """The stored snapshot as ``rules`` sees it (decoded from the row, not presented)."""
    return Snapshot.model_validate_json(await _stored_text(store, task_id))


def _split(text: str) -> tuple[list[str], str]:
    """The keys of the head of stored ``text``, in order, and the rest of it (from
    ``,"id":"``)."""
    cut = text.index(',"id":"')
    return list(json.loads(text[:cut] + "}")), text[cut:]


async def _claim_matches_the_rules(store: SQLStore, clock: ManualClock, task_id: str) -> None:
    before = await _before(store, task_id)
    now = rules.tick(clock.now())
    expected, _, lease, failure = rules.start_claim(before, WORKER, LEASE_S, now)
    assert failure is None
    assert lease is not None

    got = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1)

    assert [c.snapshot.id for c in got] == [task_id]
    claim = got[0]
    assert claim.snapshot == rules.present(expected, now)
    assert await _before(store, task_id) == expected
    # laid out as the codec lays it out: the head first, the rest spelled as the codec does
    assert _split(await _stored_text(store, task_id)) == _split(_codec.encode_snapshot(expected))
    assert claim.lease.model_dump(exclude={"token"}) == lease.model_dump(exclude={"token"})
    # the token the claim returned is the one stored: the holder can end the task
    done = await store.transition(
        task_id, claim.snapshot.revision, Completed(event_id=f"done-{task_id}"), claim.lease
    )
    assert done.snapshot.status == TaskStatus.COMPLETED


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



def _python_claims_refused(store: SQLStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the claim decided in Python fail the test: the statement must claim alone."""

    async def refused(*args: object) -> object:
        raise AssertionError("the claim statement left a row to the claim in Python")

    monkeypatch.setattr(store, "_claim_locked", refused)


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


async def _rewrite(store: SQLStore, task_id: str, **values: Any) -> None:
    t = store.tables.tasks
    async with store._db.engine.begin() as conn:
        await conn.execute(sa.update(t).where(t.c.id == task_id).values(**values))


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
