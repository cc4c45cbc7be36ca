"""Leases: generations, fencing of stale leases, expiry, renew, release, worker_snapshot."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest
from tasks_core import (
    Cancelled,
    Completed,
    Event,
    Failed,
    InputRequested,
    InvalidInput,
    Lease,
    LeaseLost,
    ManualClock,
    RetryPolicy,
    RetryRequested,
    TaskStatus,
    TaskStore,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    ALICE,
    LEASE_S,
    access,
    claim,
    created_and_claimed,
)

WorkerOp = Callable[[TaskStore, str, Lease], Awaitable[object]]


def _lease_event(kind: str) -> Event:
    """One event of each kind only the lease holder may send."""
    events: dict[str, Event] = {
        "input_requested": InputRequested(event_id="late-ask", key="k"),
        "retry_requested": RetryRequested(event_id="late-retry", error="E"),
        "completed": Completed(event_id="late-done", result=1),
        "failed": Failed(event_id="late-fail", error="E"),
    }
    return events[kind]


def _transition(kind: str) -> WorkerOp:
    async def op(store: TaskStore, task_id: str, lease: Lease) -> object:
        revision = (await store.get(task_id, tenant=None)).revision
        return await store.transition(task_id, revision, _lease_event(kind), lease)

    return op


def _aimed(lease: Lease, task_id: str) -> Lease:
    """A lease-only operation names its task through the lease."""
    return lease if lease.task_id == task_id else lease.model_copy(update={"task_id": task_id})


async def _renew(store: TaskStore, task_id: str, lease: Lease) -> object:
    return await store.renew(_aimed(lease, task_id), LEASE_S)


async def _progress(store: TaskStore, task_id: str, lease: Lease) -> object:
    return await store.report_progress(_aimed(lease, task_id), 50.0, "half")


async def _worker_snapshot(store: TaskStore, task_id: str, lease: Lease) -> object:
    return await store.worker_snapshot(_aimed(lease, task_id))


async def _release(store: TaskStore, task_id: str, lease: Lease) -> object:
    return await store.release(_aimed(lease, task_id))


LIVE_OPS: dict[str, WorkerOp] = {
    "input_requested": _transition("input_requested"),
    "retry_requested": _transition("retry_requested"),
    "completed": _transition("completed"),
    "failed": _transition("failed"),
    "renew": _renew,
    "report_progress": _progress,
    "worker_snapshot": _worker_snapshot,
}
"""Every worker operation that needs the exact *live* lease."""
ALL_OPS: dict[str, WorkerOp] = {**LIVE_OPS, "release": _release}
"""Every worker operation (release accepts an exact but expired lease)."""
STALENESS = ["older_generation", "forged_token", "other_worker", "other_task"]


class LeaseContract(ContractBase):
    """Leases: generations, fencing of stale leases, expiry, renew, release, worker_snapshot."""

    # -- generations ------------------------------------------------------------------------

    async def test_each_claim_has_a_higher_generation(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """Every new claim of a task MUST carry a higher lease generation than any claim
        before it — after a release and after an expiry alike.

        Troubleshooting: persist the highest generation issued with the task and claim with
        ``generation = previous + 1`` in the same atomic step; never derive it from the
        current (possibly ended) lease alone.
        """
        first = await created_and_claimed(store)
        await store.release(first.lease)
        second = await claim(store, first.snapshot.id, worker="w2")
        clock.advance(LEASE_S)
        [third] = await store.claim_next("w3", LEASE_S, queues=["default"])
        generations = [first.lease.generation, second.lease.generation, third.lease.generation]
        assert [1, 2, 3] == generations
        assert 3 == third.snapshot.deliveries

    # -- fencing ------------------------------------------------------------------------------

    @pytest.mark.parametrize("staleness", STALENESS)
    @pytest.mark.parametrize("operation", list(ALL_OPS))
    async def test_stale_lease_is_refused_everywhere(
        self, store: TaskStore, operation: str, staleness: str
    ) -> None:
        """Every worker operation (each lease event kind, ``renew``, ``report_progress``,
        ``worker_snapshot``, ``release``) MUST refuse a lease that is not exactly the current
        one — an older generation, a forged token, another worker id, or another task's
        lease — with ``LeaseLost``, and change nothing.

        Troubleshooting: compare token, generation and worker id (and the task id) with
        the stored lease in the same atomic step as the write. Checking the task id and
        worker alone lets a stale worker overwrite a newer attempt (the defect generations
        exist to prevent).
        """
        old = await created_and_claimed(store)
        task_id = old.snapshot.id
        await store.release(old.lease)
        current = await claim(store, task_id, worker="w1")
        other = await created_and_claimed(store)
        stale = {
            "older_generation": old.lease,
            "forged_token": current.lease.model_copy(update={"token": "forged-" + "x" * 20}),
            "other_worker": current.lease.model_copy(update={"worker_id": "w-intruder"}),
            "other_task": other.lease,
        }[staleness]
        before = await store.get(task_id, tenant=None)
        with pytest.raises(LeaseLost):
            await ALL_OPS[operation](store, task_id, stale)
        after = await store.worker_snapshot(current.lease)
        assert before == after
        assert (0, TaskStatus.RUNNING, None) == (after.revision, after.status, after.progress)

    # -- expiry -------------------------------------------------------------------------------

    @pytest.mark.parametrize("operation", list(LIVE_OPS))
    async def test_expired_lease_is_refused_by_live_operations(
        self, store: TaskStore, clock: ManualClock, operation: str
    ) -> None:
        """Once the store clock reaches ``expires_at``, transitions, ``renew``,
        ``report_progress`` and ``worker_snapshot`` MUST refuse the lease with
        ``LeaseLost`` and change nothing — even before anyone reclaims the task.

        Troubleshooting: a lease is live while ``now < expires_at`` by the store clock,
        sampled after the record is locked.
        """
        snapshot, lease = await created_and_claimed(store)
        clock.advance(LEASE_S)
        with pytest.raises(LeaseLost):
            await LIVE_OPS[operation](store, snapshot.id, lease)
        after = await store.get(snapshot.id, tenant=None)
        assert (0, TaskStatus.PENDING, None) == (after.revision, after.status, after.progress)

    async def test_release_accepts_an_expired_lease(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``release`` MUST accept the exact lease after it expired (as long as nobody
        reclaimed the task) and leave the task claimable.

        Troubleshooting: ``release`` checks token, generation and worker but not expiry
        (``rules.release``): a worker that overran its lease must still be able to hand the
        task back cleanly.
        """
        snapshot, lease = await created_and_claimed(store)
        clock.advance(LEASE_S + 5)
        released = await store.release(lease)
        assert TaskStatus.PENDING == released.status
        assert [snapshot.id] == [
            c.snapshot.id for c in await store.claim_next("w2", LEASE_S, queues=["default"])
        ]

    async def test_expired_lease_is_recovered_and_late_completion_is_fenced(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A task whose lease expired MUST be claimable by another worker without waiting
        for the old one; the old worker's late completion MUST then fail with
        ``LeaseLost`` while the new holder's completion is applied.

        Troubleshooting: fence completions on the exact lease (token + generation), not
        on the task id — the procrastinate/Oban defect this design exists to prevent.
        """
        old = await created_and_claimed(store)
        clock.advance(LEASE_S + 1)
        [new] = await store.claim_next("w2", LEASE_S, queues=["default"])
        with pytest.raises(LeaseLost):
            await store.transition(old.snapshot.id, 0, Completed(event_id="old", result="old"),
                                   old.lease)
        done = await store.transition(new.snapshot.id, 0, Completed(event_id="new", result="new"),
                                      new.lease)
        assert ("applied", TaskStatus.COMPLETED, "new") == (
            done.outcome, done.snapshot.status, done.snapshot.result
        )
        assert ["new"] == [r.event_id for r in await store.history(old.snapshot.id, tenant=None)]

    # -- renew ----------------------------------------------------------------------------------

    async def test_renew_extends_the_lease_and_makes_the_old_one_stale(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``renew`` MUST return a lease of the same generation with a new token and
        ``expires_at = now + lease_for``; the old lease MUST then be refused with
        ``LeaseLost`` and the task MUST stay leased past the old expiry.

        Troubleshooting: issue a fresh token on renew and store it atomically with the new
        expiry; the returned snapshot's ``claim`` shows the new expiry.
        """
        snapshot, lease = await created_and_claimed(store)
        clock.advance(10)
        renewed = await store.renew(lease, 60)
        expires = clock.now() + timedelta(seconds=60)
        assert (lease.generation, expires) == (renewed.lease.generation, renewed.lease.expires_at)
        assert lease.token != renewed.lease.token
        assert renewed.snapshot.claim is not None
        assert expires == renewed.snapshot.claim.expires_at
        with pytest.raises(LeaseLost):
            await store.renew(lease, 60)
        with pytest.raises(LeaseLost):
            await store.transition(snapshot.id, 0, Completed(event_id="old"), lease)
        clock.advance(LEASE_S)
        assert [] == await store.claim_next("w2", LEASE_S, queues=["default"])
        done = await store.transition(snapshot.id, 0, Completed(event_id="new"), renewed.lease)
        assert TaskStatus.COMPLETED == done.snapshot.status

    async def test_renew_with_bad_lease_for_is_invalid_and_keeps_the_lease(
        self, store: TaskStore
    ) -> None:
        """``renew`` with a ``lease_for`` outside (0, 7 days] MUST raise ``InvalidInput``
        and leave the current lease valid.

        Troubleshooting: validate ``lease_for`` before issuing a new token.
        """
        _, lease = await created_and_claimed(store)
        with pytest.raises(InvalidInput):
            await store.renew(lease, 0)
        assert TaskStatus.RUNNING == (await store.worker_snapshot(lease)).status

    async def test_renew_tells_the_worker_about_a_cancel(self, store: TaskStore) -> None:
        """After a cancel request, ``renew`` by the lease holder MUST succeed and return the
        snapshot with status ``cancelled``, so the worker learns it should stop.

        Troubleshooting: a cancel keeps the holder's lease live; ``renew`` checks the lease,
        not the status, and returns the current snapshot.
        """
        snapshot, lease = await created_and_claimed(store, owner=ALICE)
        await store.transition(snapshot.id, 0, Cancelled(event_id="stop"), access(ALICE))
        renewed = await store.renew(lease, LEASE_S)
        assert (TaskStatus.CANCELLED, "user") == (
            renewed.snapshot.status, renewed.snapshot.cancel_reason
        )
        assert TaskStatus.CANCELLED == (await store.worker_snapshot(renewed.lease)).status

    # -- release ---------------------------------------------------------------------------------

    async def test_release_makes_the_task_claimable_at_once(self, store: TaskStore) -> None:
        """``release`` MUST end the lease at once: the task reads ``pending`` and the next
        ``claim_next`` serves it without any clock movement; the released lease is stale.

        Troubleshooting: set the lease's expiry to now (or clear it) in the release write.
        """
        snapshot, lease = await created_and_claimed(store)
        released = await store.release(lease)
        assert (TaskStatus.PENDING, None) == (released.status, released.retry_at)
        [again] = await store.claim_next("w2", LEASE_S, queues=["default"])
        assert (snapshot.id, 2) == (again.snapshot.id, again.lease.generation)
        with pytest.raises(LeaseLost):
            await store.worker_snapshot(lease)

    async def test_release_consumes_no_retry_but_counts_the_delivery(
        self, store: TaskStore
    ) -> None:
        """``release`` MUST NOT consume a retry (``retry_count`` unchanged, no
        ``retry_at``) while the claim's delivery stays counted.

        Troubleshooting: release is not a failure; do not touch the retry fields. Do not
        decrement ``deliveries`` either — the delivery limit must stop a task that is
        released over and over.
        """
        snapshot, lease = await created_and_claimed(store, retry=RetryPolicy.fixed(5, attempts=3))
        released = await store.release(lease)
        assert (0, None, 1) == (released.retry_count, released.retry_at, released.deliveries)
        again = await claim(store, snapshot.id, worker="w2")
        assert (0, 2) == (again.snapshot.retry_count, again.snapshot.deliveries)

    async def test_claims_and_lease_operations_do_not_bump_the_revision(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """Claims, renewals, progress reports and releases MUST NOT change the revision or
        add history: only events do.

        Troubleshooting: keep lease fields out of the revision counter; a client holding
        revision 0 must still be able to cancel a running task at revision 0.
        """
        snapshot, lease = await created_and_claimed(store)
        renewed = await store.renew(lease, LEASE_S)
        await store.report_progress(renewed.lease, 10, None)
        await store.release(renewed.lease)
        clock.advance(1)
        await claim(store, snapshot.id, worker="w2")
        after = await store.get(snapshot.id, tenant=None)
        assert (0, []) == (after.revision, await store.history(snapshot.id, tenant=None))
