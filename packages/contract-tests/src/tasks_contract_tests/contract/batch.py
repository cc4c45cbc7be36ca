"""transition_many(): several transitions in one atomic step (capability
``batch_transitions``), each decided exactly as ``transition`` decides it.

Skipped when the capability is off (``CapabilityContract`` then proves that the call
raises ``CapabilityNotSupported``).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest
from tasks_core import (
    Access,
    Cancelled,
    Completed,
    Event,
    Failed,
    InputRequested,
    InputResponsesAccepted,
    Lease,
    ManualClock,
    Owner,
    RevisionConflict,
    TaskQuery,
    TasksError,
    TaskStatus,
    TaskStore,
    Transition,
    WatcherAdded,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    ALICE,
    LEASE_S,
    SYSTEM,
    access,
    claim,
    created_and_claimed,
    new_task,
)
from tasks_contract_tests.contract.races import RUNNERS, Call, Runner

Item = tuple[str, int, Event, Lease | Access]
Scenario = Callable[[TaskStore], Awaitable[list[Item]]]
N = 8
"""Concurrent batches in the race."""
TASKS = 6
"""Tasks every racing batch writes to."""


def _require_batches(store: TaskStore) -> None:
    if not store.capabilities.batch_transitions:
        pytest.skip("store capability 'batch_transitions' is off")


def summary(result: Transition | BaseException) -> tuple[Any, ...]:
    """What must agree between a batch and one-by-one calls (ids, tokens and run ids are
    random per store, so they are left out)."""
    if isinstance(result, RevisionConflict):
        return ("RevisionConflict", result.current.revision, result.current.status)
    if not isinstance(result, Transition):
        return (type(result).__name__,)
    record = result.record
    return (
        result.outcome,
        result.snapshot.revision,
        result.snapshot.status,
        None if record is None else (record.kind, record.revision, record.committed_at),
    )


async def every_outcome(store: TaskStore) -> list[Item]:
    """Tasks and items that produce every outcome and refusal of ``transition``, some of
    them on one task in a row (a later item sees the earlier one)."""
    done_snapshot, done_lease = await created_and_claimed(store)
    finish = Completed(event_id="finish", result={"n": 1})
    applied = await store.transition(done_snapshot.id, 0, finish, done_lease)
    assert "applied" == applied.outcome
    running, lease = await created_and_claimed(store)
    renewed, renewed_lease = await created_and_claimed(store)
    await store.renew(renewed_lease, LEASE_S)
    asking, asking_lease = await created_and_claimed(store)
    plain = await store.create(new_task())
    return [
        (running.id, 0, Completed(event_id="done", result=1), lease),  # applied
        (running.id, 1, Completed(event_id="done", result=1), lease),  # duplicate in batch
        (done_snapshot.id, 0, finish, done_lease),  # duplicate of an earlier call
        (done_snapshot.id, 1, Cancelled(event_id="late"), access(ALICE)),  # unchanged
        (done_snapshot.id, 1, Completed(event_id="finish", result=2), done_lease),  # reused
        ("no-such-task", 0, Cancelled(event_id="c"), access(ALICE)),  # TaskNotFound
        (renewed.id, 0, Completed(event_id="stale"), renewed_lease),  # LeaseLost
        (plain.id, 0, Completed(event_id="x"), access(ALICE)),  # AuthorizationError
        (plain.id, 5, Cancelled(event_id="c"), access(ALICE)),  # RevisionConflict
        (plain.id, 0, WatcherAdded(event_id="w", principal=Owner("eve", tenant="evil")),
         access(SYSTEM)),  # InvalidInput
        (asking.id, 0, InputRequested(event_id="ask", key="ok", request={}), asking_lease),
        (asking.id, 1, InputResponsesAccepted(event_id="yes", responses={"ok": True}),
         access(ALICE)),  # applied: sees the question the item before asked
        (plain.id, 0, Cancelled(event_id="c"), access(ALICE)),  # applied after refusals
    ]


class BatchContract(ContractBase):
    """transition_many(): several transitions in one atomic step."""

    async def test_batch_results_equal_one_by_one_transitions(
        self, make_store: Callable[..., Awaitable[TaskStore]]
    ) -> None:
        """``transition_many(items)`` MUST return, in order, exactly what ``transition``
        returns (or raises) for each item called one after another — every outcome
        (``applied``, ``duplicate``, ``unchanged``) and every refusal (``TaskNotFound``,
        ``LeaseLost``, ``AuthorizationError``, ``EventIdReused``, ``RevisionConflict``,
        ``InvalidInput``) — and leave the same histories; a later item on the same task
        MUST see the earlier items applied.

        Troubleshooting: decide each item with the code ``transition`` uses (the
        :mod:`tasks_core.rules` steps in the same order), against the task as the earlier
        items of the batch left it; return a refusal as the item's result instead of
        raising it.
        """
        one_by_one_store, batch_store = await make_store(), await make_store()
        _require_batches(batch_store)
        expected: list[Transition | BaseException] = []
        for task_id, revision, event, authority in await every_outcome(one_by_one_store):
            try:
                expected.append(await one_by_one_store.transition(
                    task_id, revision, event, authority))
            except TasksError as exc:
                expected.append(exc)
        items = await every_outcome(batch_store)
        results = await batch_store.transition_many(items)
        assert [summary(r) for r in expected] == [summary(r) for r in results]
        for task_id, other_id in zip(
            await _task_ids(one_by_one_store), await _task_ids(batch_store), strict=True
        ):
            expected_history = await one_by_one_store.history(task_id, tenant=None)
            history = await batch_store.history(other_id, tenant=None)
            assert [(r.kind, r.revision, r.committed_at) for r in expected_history] == [
                (r.kind, r.revision, r.committed_at) for r in history
            ]

    async def test_one_refused_item_does_not_stop_the_others(self, store: TaskStore) -> None:
        """A refused item MUST come back as its error, in its place, and write nothing of
        that item, while every other item of the batch applies.

        Troubleshooting: catch the refusal of one item, record it as that item's result
        and go on with the next; do not abort (or roll back) the whole step for it.
        """
        _require_batches(store)
        tasks = [await store.create(new_task()) for _ in range(3)]
        items: list[Item] = [
            (tasks[0].id, 0, Cancelled(event_id="c0"), access(ALICE)),
            (tasks[1].id, 7, Cancelled(event_id="c1"), access(ALICE)),  # stale revision
            (tasks[2].id, 0, Cancelled(event_id="c2"), access(ALICE)),
            ("missing", 0, Cancelled(event_id="c3"), access(ALICE)),
        ]
        results = await store.transition_many(items)
        assert [("applied", 1, TaskStatus.CANCELLED, ("cancelled", 1)), ("RevisionConflict", 0),
                ("applied", 1, TaskStatus.CANCELLED, ("cancelled", 1)), ("TaskNotFound",)] == [
            _short(r) for r in results
        ]
        refused = await store.get(tasks[1].id, tenant="default")
        assert (0, TaskStatus.PENDING, []) == (
            refused.revision, refused.status, await store.history(tasks[1].id, tenant=None)
        )
        for kept in (tasks[0], tasks[2]):
            assert ["cancelled"] == [r.kind for r in await store.history(kept.id, tenant=None)]

    async def test_stale_lease_in_a_batch_is_refused_while_the_rest_apply(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """Each item of a batch MUST be fenced by its own lease: a lease made stale by a
        renew (token), by a newer claim after expiry (generation), or simply expired MUST
        get ``LeaseLost`` and change nothing, while the live leases of the same batch
        finish their tasks.

        Troubleshooting: check every item's lease against its task's current token,
        generation, worker and expiry, exactly as ``transition`` does; a batch is never
        authorized as a whole.
        """
        _require_batches(store)
        taken = await created_and_claimed(store, max_deliveries=5)
        clock.advance(LEASE_S)
        retaken = await claim(store, taken.snapshot.id, "w2")
        fresh = [await created_and_claimed(store) for _ in range(2)]
        renewed = await created_and_claimed(store)
        await store.renew(renewed.lease, LEASE_S)
        short = await store.create(new_task())
        short_lease = (await store.claim(short.id, "w1", 1.0)).lease
        clock.advance(1.0)
        items: list[Item] = [
            (fresh[0].snapshot.id, 0, Completed(event_id="d0"), fresh[0].lease),
            (renewed.snapshot.id, 0, Completed(event_id="d1"), renewed.lease),
            (taken.snapshot.id, 0, Completed(event_id="d2"), taken.lease),
            (short.id, 0, Completed(event_id="d3"), short_lease),
            (fresh[1].snapshot.id, 0, Failed(event_id="d4", error="E"), fresh[1].lease),
        ]
        results = await store.transition_many(items)
        assert [
            ("applied", 1, TaskStatus.COMPLETED, ("completed", 1)),
            ("LeaseLost",),
            ("LeaseLost",),
            ("LeaseLost",),
            ("applied", 1, TaskStatus.FAILED, ("failed", 1)),
        ] == [_short(r) for r in results]
        for fenced, status in ((renewed.snapshot.id, TaskStatus.RUNNING),
                               (taken.snapshot.id, TaskStatus.RUNNING),
                               (short.id, TaskStatus.PENDING)):
            current = await store.get(fenced, tenant="default")
            assert (0, status) == (current.revision, current.status)
            assert [] == await store.history(fenced, tenant=None)
        done = await store.transition(
            retaken.snapshot.id, 0, Completed(event_id="d2"), retaken.lease
        )
        assert "applied" == done.outcome

    @RUNNERS
    async def test_concurrent_batches_have_exactly_one_winner_per_revision(
        self, store: TaskStore, run: Runner
    ) -> None:
        """N concurrent batches, each writing every one of the same tasks at revision 0
        (in its own order), MUST produce exactly one ``applied`` per task and a
        ``RevisionConflict`` for every other writer of it; each history holds its winner
        alone.

        Troubleshooting: guard every item by its own revision inside the atomic step (a
        per-row conditional update or row locks held to the commit); take row locks in
        one order (by id) so batches cannot deadlock, or retry the whole step on a
        deadlock — nothing of a rolled-back step may be reported as applied.
        """
        _require_batches(store)
        tasks = [await store.create(new_task()) for _ in range(TASKS)]
        shuffle = random.Random(7)
        sent: list[list[Item]] = []
        for n in range(N):
            items: list[Item] = [
                (t.id, 0, WatcherAdded(event_id=f"w{n}", principal=Owner(f"user{n}")),
                 access(SYSTEM))
                for t in tasks
            ]
            shuffle.shuffle(items)
            sent.append(items)
        calls: list[Call] = [partial(store.transition_many, items) for items in sent]
        batches = await run(calls)
        by_task: dict[str, list[Transition | TasksError]] = {t.id: [] for t in tasks}
        for batch, items in zip(batches, sent, strict=True):
            assert isinstance(batch, list), batch
            for (task_id, *_), result in zip(items, batch, strict=True):
                by_task[task_id].append(result)
        for task in tasks:
            results = by_task[task.id]
            assert sorted(["applied"] + ["RevisionConflict"] * (N - 1)) == sorted(
                _short(r)[0] for r in results
            )
            winner = next(r for r in results if isinstance(r, Transition))
            assert [winner.record] == await store.history(task.id, tenant=None)

    async def test_malformed_batch_is_refused_before_anything_is_written(
        self, store: TaskStore
    ) -> None:
        """A batch with a malformed item (not a ``(str, int, Event, Lease | Access)``
        tuple) MUST raise ``TypeError`` and write none of its items; an empty batch MUST
        return an empty list.

        Troubleshooting: validate every item (``tasks_core.rules.check_batch``) before the
        atomic step starts.
        """
        _require_batches(store)
        assert [] == await store.transition_many([])
        created = await store.create(new_task())
        good: Item = (created.id, 0, Cancelled(event_id="c"), access(ALICE))
        bad: Any = (created.id, "0", Cancelled(event_id="d"), access(ALICE))
        with pytest.raises(TypeError):
            await store.transition_many([good, bad])
        assert 0 == (await store.get(created.id, tenant="default")).revision


async def _task_ids(store: TaskStore) -> list[str]:
    """The ids of every task in ``store``, in creation order."""
    tasks = await store.list(TaskQuery(tenant=None, limit=1000))
    return [t.id for t in sorted(tasks, key=lambda t: (t.created_at, t.id))]


def _short(result: Transition | BaseException) -> tuple[Any, ...]:
    if isinstance(result, RevisionConflict):
        return ("RevisionConflict", result.current.revision)
    if not isinstance(result, Transition):
        return (type(result).__name__,)
    record = result.record
    return (
        result.outcome,
        result.snapshot.revision,
        result.snapshot.status,
        None if record is None else (record.kind, record.revision),
    )
