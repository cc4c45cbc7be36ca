"""create(): atomic first snapshot, TaskExists, replace."""

from __future__ import annotations

import pytest
from tasks_core import (
    Cancelled,
    Completed,
    LeaseLost,
    ManualClock,
    RevisionConflict,
    Snapshot,
    TaskExists,
    TaskNotFound,
    TaskQuery,
    TaskStatus,
    TaskStore,
    Unavailable,
    WatcherAdded,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    ALICE,
    BOB,
    SYSTEM,
    access,
    claim,
    created_and_claimed,
    finished_task,
    new_task,
)


class CreateContract(ContractBase):
    """create(): atomic first snapshot, TaskExists, replace."""

    async def test_create_stores_revision_zero_with_store_assigned_fields(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``create`` MUST store the task at revision 0, status ``pending``, with a fresh
        ``run_id`` and ``created_at == updated_at ==`` the store clock, and ``get`` MUST
        return exactly the snapshot ``create`` returned.

        Troubleshooting: take ``created_at`` from the store clock (the injected ``clock``
        when one is given), never from the caller or the database default of another
        timezone; build the row with ``rules.new_snapshot`` so every field starts alike.
        """
        clock.advance(12.345)
        created = await store.create(new_task(input={"n": 1}, watchers=(BOB,)))
        assert 0 == created.revision
        assert TaskStatus.PENDING == created.status
        assert created.run_id
        assert clock.now() == created.created_at
        assert clock.now() == created.updated_at
        assert (None, None, 0) == (created.started_at, created.finished_at, created.deliveries)
        assert (BOB,) == created.watchers
        assert {"n": 1} == created.work.input
        assert created == await store.get(created.id, tenant="default")
        assert [] == await store.history(created.id, tenant="default")
        other = await store.create(new_task())
        assert created.run_id != other.run_id

    async def test_create_existing_id_raises_task_exists(self, store: TaskStore) -> None:
        """``create`` on a taken id MUST raise ``TaskExists`` carrying the current snapshot
        (as ``get`` returns it, including revisions applied since creation).

        Troubleshooting: check the id inside the same atomic step as the insert (a unique
        key, not a read-then-write) and load the current row for ``.current``.
        """
        created = await store.create(new_task())
        grant = WatcherAdded(event_id="grant", principal=BOB)
        await store.transition(created.id, 0, grant, access(SYSTEM))
        with pytest.raises(TaskExists) as caught:
            await store.create(new_task(created.id))
        assert await store.get(created.id, tenant="default") == caught.value.current
        assert 1 == caught.value.current.revision

    async def test_refused_create_changes_nothing(self, store: TaskStore) -> None:
        """A refused ``create`` MUST leave the existing task, its history and the listing
        exactly as they were.

        Troubleshooting: an upsert (``INSERT … ON CONFLICT UPDATE``, ``replace_one(upsert=
        True)``) overwrites the live task; use a plain insert that fails on the key.
        """
        created = await store.create(new_task(input={"v": "first"}, queue="q1"))
        before = await store.history(created.id, tenant="default")
        with pytest.raises(TaskExists):
            await store.create(new_task(created.id, owner=BOB, input={"v": "second"}, queue="q2"))
        assert created == await store.get(created.id, tenant="default")
        assert before == await store.history(created.id, tenant="default")
        assert [created] == await store.list(TaskQuery(tenant=None))

    async def test_replace_starts_a_new_run_and_drops_old_history(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``create(new, replace=terminal)`` MUST atomically swap the finished run for a new
        one: new ``run_id``, revision 0, status ``pending``, watchers and payload from the
        new task (the old watchers are reset), and the old run's history removed.

        Troubleshooting: delete the old history (and event ids) in the same transaction as
        the new row; otherwise ``history`` mixes runs and old event ids answer
        ``duplicate`` for the new run.
        """
        done = await finished_task(store, watchers=(BOB,), input={"run": 1})
        clock.advance(5)
        fresh = await store.create(new_task(done.id, input={"run": 2}), replace=done)
        assert done.run_id != fresh.run_id
        assert (0, TaskStatus.PENDING, ()) == (fresh.revision, fresh.status, fresh.watchers)
        assert {"run": 2} == fresh.work.input
        assert (clock.now(), None, None) == (fresh.created_at, fresh.finished_at, fresh.result)
        assert fresh == await store.get(done.id, tenant="default")
        assert [] == await store.history(done.id, tenant="default")
        again = await store.transition(done.id, 0, Cancelled(event_id="finish"), access(ALICE))
        assert "applied" == again.outcome

    async def test_replace_fences_every_lease_of_the_old_run(self, store: TaskStore) -> None:
        """After a replace, a lease of the old run MUST get ``LeaseLost`` on every worker
        operation, and the new run's first claim MUST have a higher generation.

        Troubleshooting: keep the lease generation counter across the replace (never reset
        it to 0) and drop the old token, so a still-running handler of the superseded run
        cannot write into the new one.
        """
        old_snapshot, old_lease = await created_and_claimed(store)
        cancelled = await store.transition(
            old_snapshot.id, 0, Cancelled(event_id="stop"), access(ALICE)
        )
        await store.create(new_task(old_snapshot.id), replace=cancelled.snapshot)
        with pytest.raises(LeaseLost):
            await store.transition(old_snapshot.id, 0, Completed(event_id="late"), old_lease)
        with pytest.raises(LeaseLost):
            await store.worker_snapshot(old_lease)
        with pytest.raises(LeaseLost):
            await store.renew(old_lease, 30)
        with pytest.raises(LeaseLost):
            await store.report_progress(old_lease, 50, None)
        _, new_lease = await claim(store, old_snapshot.id, "w2")
        assert new_lease.generation > old_lease.generation

    async def test_replace_at_a_stale_revision_raises_revision_conflict(
        self, store: TaskStore
    ) -> None:
        """``replace`` MUST name exactly the current run and revision: an older revision or
        another run raises ``RevisionConflict`` with the current snapshot, storing nothing.

        Troubleshooting: compare both ``run_id`` and ``revision`` in the replacing write's
        condition (``WHERE run_id = … AND revision = …``).
        """
        created = await store.create(new_task())
        done = await store.transition(created.id, 0, Cancelled(event_id="c"), access(ALICE))
        with pytest.raises(RevisionConflict) as caught:
            await store.create(new_task(created.id), replace=created)
        assert done.snapshot == caught.value.current
        second = await store.create(new_task(created.id), replace=done.snapshot)
        finish = Cancelled(event_id="c2")
        second_done = await store.transition(created.id, 0, finish, access(ALICE))
        assert (second.run_id, 1) == (second_done.snapshot.run_id, second_done.snapshot.revision)
        with pytest.raises(RevisionConflict):
            await store.create(new_task(created.id), replace=done.snapshot)
        assert second_done.snapshot == await store.get(created.id, tenant="default")

    async def test_replace_of_a_live_task_raises_unavailable(self, store: TaskStore) -> None:
        """``replace`` of a task that is neither terminal nor expired MUST raise
        ``Unavailable`` and leave it untouched.

        Troubleshooting: a live run may be executing right now; only a finished (or
        expired) task may be swapped for a new run.
        """
        snapshot, _ = await created_and_claimed(store)
        with pytest.raises(Unavailable):
            await store.create(new_task(snapshot.id), replace=snapshot)
        assert snapshot == await store.get(snapshot.id, tenant="default")

    async def test_replace_of_a_missing_id_raises_task_not_found(self, store: TaskStore) -> None:
        """``replace`` naming an id that no longer exists MUST raise ``TaskNotFound`` and
        store nothing (it is not an insert).

        Troubleshooting: a replace is an update of an existing row; when the row is gone
        (deleted or reaped) do not fall back to inserting.
        """
        done = await finished_task(store)
        await store.delete(done.id, expected_revision=done.revision)
        with pytest.raises(TaskNotFound):
            await store.create(new_task(done.id), replace=done)
        assert [] == await store.list(TaskQuery(tenant=None))

    async def test_replace_accepts_an_expired_task(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """An expired (not yet reaped) task MUST be replaceable with the snapshot carried by
        ``TaskExists``, giving a visible new run.

        Troubleshooting: an expired task still holds its id until ``reap``; ``create`` must
        report it through ``TaskExists.current`` and accept it as ``replace``.
        """
        created = await store.create(new_task(ttl_s=10))
        clock.advance(10)
        with pytest.raises(TaskExists) as caught:
            await store.create(new_task(created.id))
        assert created.run_id == caught.value.current.run_id
        fresh = await store.create(new_task(created.id), replace=caught.value.current)
        assert fresh == await store.get(created.id, tenant="default")
        assert created.run_id != fresh.run_id

    async def test_stored_payloads_are_copies_of_the_callers_values(
        self, store: TaskStore
    ) -> None:
        """The store MUST keep copies: mutating the input dict after ``create``, a result
        after ``transition``, or a snapshot returned by ``get`` MUST NOT change what is
        stored.

        Troubleshooting: serialize on write (JSON, BSON, a deep copy) and decode on read;
        never keep a reference to the caller's objects in an in-memory structure.
        """
        payload: dict[str, list[int]] = {"items": [1, 2]}
        snapshot, lease = await created_and_claimed(store, input=payload)
        payload["items"].append(3)
        payload["extra"] = []
        result: dict[str, list[int]] = {"out": [7]}
        await store.transition(snapshot.id, 0, Completed(event_id="done", result=result), lease)
        result["out"].append(8)
        read = await store.get(snapshot.id, tenant="default")
        assert isinstance(read.work.input, dict)
        read.work.input["items"].append(99)
        again = await store.get(snapshot.id, tenant="default")
        assert {"items": [1, 2]} == again.work.input
        assert {"out": [7]} == again.result

    async def test_snapshots_returned_by_every_call_are_the_callers_copies(
        self, store: TaskStore
    ) -> None:
        """Every snapshot a call returns — from ``create``, ``list``, ``claim_next``, ``claim``,
        ``worker_snapshot``, ``renew``, ``report_progress``, ``release`` and
        ``transition`` — MUST be the caller's own: mutating its payload (the input, the
        trace context, the result) MUST NOT change what the store holds, nor what any later
        call returns.

        Troubleshooting: decode every answer from the stored form (or deep-copy it);
        an in-memory store that hands out the objects it keeps (or caches decoded
        snapshots and returns them) lets one caller's mutation reach every other reader.
        """
        new = new_task(input={"items": [1, 2]})
        traced = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
        created = await store.create(new.model_copy(update={
            "work": new.work.model_copy(update={"trace_context": dict(traced)})}))
        spoiled: list[Snapshot] = []

        def spoil(snapshot: Snapshot) -> None:
            assert isinstance(snapshot.work.input, dict)
            snapshot.work.input["items"].append(len(spoiled))
            assert snapshot.work.trace_context is not None
            snapshot.work.trace_context["tracestate"] = str(len(spoiled))
            spoiled.append(snapshot)

        spoil(created)
        [served] = await store.claim_next("w1", 30, queues=["default"])
        spoil(served.snapshot)
        [listed] = await store.list(TaskQuery(tenant=None))
        spoil(listed)
        spoil(await store.worker_snapshot(served.lease))
        renewed = await store.renew(served.lease, 30)
        spoil(renewed.snapshot)
        spoil(await store.report_progress(renewed.lease, 50, "half"))
        spoil(await store.release(renewed.lease))
        again = await claim(store, created.id, "w2")
        spoil(again.snapshot)
        done = await store.transition(created.id, 0, Completed(event_id="d", result={"n": [7]}),
                                      again.lease)
        spoil(done.snapshot)
        assert isinstance(done.snapshot.result, dict)
        done.snapshot.result["n"].append(8)
        [relisted] = await store.list(TaskQuery(tenant=None))
        for read in (await store.get(created.id, tenant=None), relisted):
            assert ({"items": [1, 2]}, {"n": [7]}) == (read.work.input, read.result)
            assert traced == read.work.trace_context
