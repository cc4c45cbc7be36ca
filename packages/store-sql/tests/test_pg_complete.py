"""PostgreSQL's completion statement (``_pg_complete``) writes exactly what
``rules.apply_event`` decides — every column as the codec writes it, the body untouched,
the history record the row stands for — and leaves every completion it cannot decide
alone to the transaction that decides in Python, which answers as the rules do."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from _stored_kit import stored_row as _stored_row
from _stored_kit import stored_snapshot as _before
from conftest import Opener
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import (
    Completed,
    LeaseLost,
    ManualClock,
    RetryPolicy,
    RetryRequested,
    RevisionConflict,
    Snapshot,
    StoreUnavailable,
    TasksError,
    TaskStatus,
    Transition,
    rules,
)
from tasks_core.errors import EventIdReused
from tasks_core.models import Claim
from tasks_store_sql import PostgresStore, SQLStore, _codec
from tasks_store_sql._stored import encode_body

pytestmark = pytest.mark.anyio

WORKER = "w-complete"
WHOLE_SECOND = datetime(2030, 1, 1, tzinfo=UTC)
RESULTS: list[Any] = [
    None,
    {"n": 1, "id": "x", "q": ',"id":"', "status": "pending"},
    [1.5, 1e20, -0.0, 2**70, "\\ \"quoted\" \u0001"],
    "text",
]


def _fast(store: SQLStore) -> PostgresStore:
    assert isinstance(store, PostgresStore)
    return store


def _statement_only(store: SQLStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any item goes to the transaction decided in Python."""

    async def refused(items: Sequence[rules.BatchItem]) -> list[Transition | TasksError]:
        raise AssertionError(f"{len(items)} item(s) went to the transaction")

    monkeypatch.setattr(_fast(store), "_transition_locked", refused)


def _transactions_seen(store: SQLStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many items each call of the transaction decided in Python got."""
    seen: list[int] = []
    fast = _fast(store)
    original = fast._transition_locked

    async def counted(items: Sequence[rules.BatchItem]) -> list[Transition | TasksError]:
        seen.append(len(items))
        return await original(items)

    monkeypatch.setattr(fast, "_transition_locked", counted)
    return seen


async def _row(store: SQLStore, task_id: str) -> dict[str, Any]:
    t = store.tables.tasks
    async with store._db.engine.connect() as conn:
        row = (await conn.execute(sa.select(t).where(t.c.id == task_id))).mappings().one()
    return dict(row)


async def _records(store: SQLStore, task_id: str) -> list[str]:
    ev = store.tables.events
    async with store._db.engine.connect() as conn:
        found = await conn.execute(
            sa.select(ev.c.record).where(ev.c.task_id == task_id).order_by(ev.c.revision)
        )
        return [str(text) for text in found.scalars()]


async def _claim(store: SQLStore, count: int = 1) -> list[Claim]:
    claims = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=count)
    assert len(claims) == count
    return claims


async def _stored_as_decided(
    store: SQLStore, before: Snapshot, done: Transition, now: datetime
) -> None:
    """``done`` was committed at the instant the rules take at ``now``, and the row —
    every column as the codec writes it, the body untouched — and the history record it
    stands for (no ``task_events`` row) are what they decide."""
    assert done.record is not None
    assert done.record.committed_at == rules.next_commit_time(before, now)
    expected = rules.apply_event(before, done.record.event, done.record.committed_at)
    assert expected is not None
    snapshot, record = expected
    assert done.snapshot == snapshot
    assert done.record == record
    row = await _row(store, snapshot.id)
    assert row["snapshot"] == encode_body(before)  # the body as the task was created
    columns = _codec.projection(snapshot, row["claim_token"], record.event_id)
    assert {k: row[k] for k in columns} == columns
    assert row["final_event"] == record.event_id
    assert _codec.encode_model(record) not in await _records(store, snapshot.id)
    assert (await store.history(snapshot.id, tenant=None))[-1] == record


@pytest.mark.parametrize("result", RESULTS, ids=["none", "traps", "numbers", "text"])
@pytest.mark.parametrize("lifetime", [(None, None), (90.0, None), (None, 60.0), (30.0, 60.0),
                                      (600.0, 60.0)], ids=["forever", "ttl", "retention",
                                                           "ttl-first", "retention-first"])
async def test_a_completion_is_stored_as_the_rules_decide_it(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch,
    result: Any, lifetime: tuple[float | None, float | None],
) -> None:
    """A claimed run's completion is written by the statement alone and stores exactly
    what ``rules.apply_event`` decides at the commit instant it returns: every column,
    the snapshot's text as the codec spells it, the history record — whatever the result
    holds, with a TTL, a retention or both."""
    ttl_s, retention_s = lifetime
    task = await store.create(new_task(input={"n": 1}, ttl_s=ttl_s, retention_s=retention_s))
    clock.advance(1.5)
    [claim] = await _claim(store)
    before = await _before(store, task.id)
    clock.advance(0.25)
    _statement_only(store, monkeypatch)

    done = await store.transition(
        task.id, claim.snapshot.revision, Completed(event_id="done", result=result), claim.lease
    )

    assert done.outcome == "applied"
    await _stored_as_decided(store, before, done, clock.now())
    assert await store.get(task.id, tenant=None) == done.snapshot


async def test_instants_on_a_whole_second_and_a_recovered_lease_are_spelled_as_the_codec_does(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The commit instant on a whole second (pydantic leaves the fraction out), and a
    claim that took over a lapsed lease (``recovered``, ``started_at`` kept)."""
    clock = ManualClock(WHOLE_SECOND)
    store = closing(await postgres_opener(clock=clock))
    task = await store.create(new_task())
    await _claim(store)
    clock.advance(LEASE_S + 1)  # the first lease lapses
    [claim] = await _claim(store)
    assert claim.snapshot.claim is not None
    assert claim.snapshot.claim.recovered
    before = await _before(store, task.id)
    clock.advance((datetime(2030, 1, 1, 0, 1, tzinfo=UTC) - clock.now()).total_seconds())
    _statement_only(store, monkeypatch)

    done = await store.transition(task.id, claim.snapshot.revision,
                                  Completed(event_id="done"), claim.lease)

    assert done.snapshot.updated_at == datetime(2030, 1, 1, 0, 1, tzinfo=UTC)
    await _stored_as_decided(store, before, done, clock.now())


async def test_a_worker_id_that_spells_json_is_read_as_its_string(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker id holding quotes, a backslash and the text of the head's next key is one
    JSON string of the head: the statement plans the completion and stores what the rules
    decide."""
    worker = 'w"1\\,"expires_at":"x'
    task = await store.create(new_task())
    [claim] = await store.claim_next(worker, LEASE_S, queues=["default"], limit=1)
    before = await _before(store, task.id)
    assert before.claim is not None
    assert before.claim.worker_id == worker
    clock.advance(0.25)
    _statement_only(store, monkeypatch)

    done = await store.transition(task.id, claim.snapshot.revision,
                                  Completed(event_id="done"), claim.lease)

    await _stored_as_decided(store, before, done, clock.now())


async def test_a_group_of_completions_is_one_statement_and_each_is_stored_as_decided(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several completions in one ``transition_many`` are written together, each as the
    rules decide it, results in the items' order."""
    tasks = [await store.create(new_task(input={"i": i})) for i in range(5)]
    claims = await _claim(store, 5)
    befores = {t.id: await _before(store, t.id)
               for t in tasks}
    _statement_only(store, monkeypatch)

    items = [(c.snapshot.id, c.snapshot.revision, Completed(event_id=f"d{i}", result=i),
              c.lease) for i, c in enumerate(reversed(claims))]
    results = await store.transition_many(items)

    assert [r.snapshot.id for r in results if isinstance(r, Transition)] == [
        item[0] for item in items]
    for item, done in zip(items, results, strict=True):
        assert isinstance(done, Transition)
        await _stored_as_decided(store, befores[item[0]], done, clock.now())


async def test_completions_the_statement_cannot_decide_go_to_the_transaction(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the statement's own cases are written by it; the rest of the group goes to
    the transaction and is answered as the rules answer it: a progress report since the
    claim (applied), a stale revision (``RevisionConflict``), a lease that lapsed
    another generation's lease (``LeaseLost``), an event id the task saw before
    (``EventIdReused``), a task named twice (in order: the second finds the lease ended)
    — beside a completion the statement writes."""
    retried = await store.create(new_task(retry=RetryPolicy.fixed(1.0, attempts=3)))
    first = (await _claim(store))[0]
    await store.transition(retried.id, first.snapshot.revision,
                           RetryRequested(event_id="seen", error="Boom"), first.lease)
    clock.advance(2)
    plain, progressed, stale, forged, twice = [await store.create(new_task()) for _ in range(5)]
    claims = {c.snapshot.id: c for c in await _claim(store, 6)}
    await store.report_progress(claims[progressed.id].lease, 50.0, "half")
    seen = _transactions_seen(store, monkeypatch)

    def item(task_id: str, event_id: str, revision: int | None = None) -> rules.BatchItem:
        claim = claims[task_id]
        return (task_id, claim.snapshot.revision if revision is None else revision,
                Completed(event_id=event_id), claim.lease)

    forged_lease = claims[forged.id].lease.model_copy(update={"generation": 99})
    results = await store.transition_many([
        item(plain.id, "p"),
        item(progressed.id, "g"),
        item(stale.id, "s", revision=7),
        (forged.id, claims[forged.id].snapshot.revision, Completed(event_id="f"), forged_lease),
        item(retried.id, "seen"),
        item(twice.id, "t1"),
        item(twice.id, "t2"),
    ])

    assert seen == [6]  # all but the first went to the transaction, in one call
    outcomes = [r.outcome if isinstance(r, Transition) else type(r) for r in results]
    assert outcomes == ["applied", "applied", RevisionConflict, LeaseLost, EventIdReused,
                        "applied", LeaseLost]
    progress = (await store.get(progressed.id, tenant=None)).progress
    assert progress is not None  # written since the claim, kept
    assert progress.value == 50.0


async def test_a_completion_the_statement_refuses_at_the_lock_writes_nothing(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease that lapsed by the store clock is refused by the statement (nothing
    written) and by the transaction after it (``LeaseLost``)."""
    task = await store.create(new_task())
    [claim] = await _claim(store)
    stored = await _stored_row(store, task.id)
    clock.advance(LEASE_S + 1)
    seen = _transactions_seen(store, monkeypatch)

    [result] = await store.transition_many(
        [(task.id, claim.snapshot.revision, Completed(event_id="late"), claim.lease)])

    assert isinstance(result, LeaseLost)
    assert seen == [1]
    assert await _stored_row(store, task.id) == stored
    assert await _records(store, task.id) == []


async def test_a_failed_transaction_after_the_statement_fails_only_its_own_items(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the transaction fails after the statement wrote completions, those keep their
    results and only the transaction's items hear ``StoreUnavailable``; a batch of which
    nothing was written raises it."""
    done, stale = [await store.create(new_task()) for _ in range(2)]
    claims = {c.snapshot.id: c for c in await _claim(store, 2)}

    async def down(items: Sequence[rules.BatchItem]) -> list[Transition | TasksError]:
        raise StoreUnavailable("down")

    monkeypatch.setattr(_fast(store), "_transition_locked", down)

    def item(task_id: str, revision: int) -> rules.BatchItem:
        return (task_id, revision, Completed(event_id=task_id), claims[task_id].lease)

    results = await store.transition_many([item(done.id, 0), item(stale.id, 5)])

    assert [type(r) for r in results] == [Transition, StoreUnavailable]
    assert (await store.get(done.id, tenant=None)).status == TaskStatus.COMPLETED
    with pytest.raises(StoreUnavailable):
        await store.transition_many([item(stale.id, 5)])


async def test_a_held_claims_completion_is_the_statements_and_ends_the_hold(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of a claim held ahead of its slot that ends before any renew is completed by
    the statement alone, stored as ``rules.apply_event`` decides: its claim ended and no
    longer held."""
    task = await store.create(new_task(input={"n": 1}))
    clock.advance(1.5)
    [claim] = await store.claim_next(WORKER, LEASE_S, queues=["default"], start=0)
    assert claim.snapshot.claim is not None
    assert claim.snapshot.claim.held
    before = await _before(store, task.id)
    clock.advance(0.25)
    _statement_only(store, monkeypatch)

    done = await store.transition(
        task.id, claim.snapshot.revision, Completed(event_id="done", result=1), claim.lease
    )

    assert done.outcome == "applied"
    assert done.snapshot.claim is not None
    assert not done.snapshot.claim.held
    await _stored_as_decided(store, before, done, clock.now())


@pytest.mark.parametrize("lifetime", [(None, None), (30.0, None), (30.0, 600.0)],
                         ids=["forever", "ttl", "ttl-first"])
async def test_a_scheduled_tasks_completion_is_the_statements_and_its_ttl_counts_from_run_at(
    store: SQLStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch,
    lifetime: tuple[float | None, float | None],
) -> None:
    """A delayed task's stored text ends with its ``run_at``, past the head the statement
    rewrites: its completion is the statement's alone, its expiry ``rules.ttl_end`` (from
    ``run_at``), every column as the rules decide."""
    ttl_s, retention_s = lifetime
    task = await store.create(new_task(delay_s=20, ttl_s=ttl_s, retention_s=retention_s))
    clock.advance(21)
    [claim] = await _claim(store)
    before = await _before(store, task.id)
    assert before.run_at is not None
    clock.advance(0.25)
    _statement_only(store, monkeypatch)

    done = await store.transition(
        task.id, claim.snapshot.revision, Completed(event_id="done", result=1), claim.lease
    )

    assert done.outcome == "applied"
    await _stored_as_decided(store, before, done, clock.now())
    if ttl_s is not None:
        assert done.snapshot.expires_at == rules.ttl_end(before)
