"""Retry deadlines (application-requested retries) and the delivery limit (crash loops)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tasks_core import (
    Claim,
    Deferred,
    ErrorInfo,
    LeaseLost,
    ManualClock,
    RetryPolicy,
    RetryRequested,
    TaskStatus,
    TaskStore,
    Transition,
    Unavailable,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import LEASE_S, claim, created_and_claimed, new_task

DELIVERY_LIMIT_ERROR = "DeliveryLimitExceeded"


async def _retry(store: TaskStore, held: Claim, event_id: str = "retry") -> Transition:
    """Ask for a retry with the lease of ``held`` at the task's current revision."""
    current = await store.worker_snapshot(held.lease)
    return await store.transition(
        current.id,
        current.revision,
        RetryRequested(event_id=event_id, error="Flaky", message=f"attempt {event_id}"),
        held.lease,
    )


async def _expire(store: TaskStore, clock: ManualClock, task_id: str, worker: str) -> Claim:
    """Claim ``task_id`` and let the lease run out (a crashed worker)."""
    held = await claim(store, task_id, worker=worker)
    clock.advance(LEASE_S)
    return held


class RetryContract(ContractBase):
    """Retry deadlines (application-requested retries) and the delivery limit."""

    # -- scheduling ------------------------------------------------------------------------

    async def test_retry_requested_schedules_retry_at_from_the_commit_time(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``retry_requested`` with retries left MUST leave the task ``pending`` with
        ``retry_count + 1``, ``retry_at = committed_at + delay``, ``last_failure`` set from
        the event, no ``error``, and the record MUST carry the same ``retry_at``.

        Troubleshooting: compute the deadline from the event's store-assigned
        ``committed_at`` in the same atomic step (``rules.apply_event``), never from the
        worker's clock.
        """
        held = await created_and_claimed(store, retry=RetryPolicy.fixed(7.5, attempts=3))
        clock.advance(2)
        done = await _retry(store, held)
        snap, record = done.snapshot, done.record
        assert record is not None
        expected_at = record.committed_at + timedelta(seconds=7.5)
        assert ("applied", TaskStatus.PENDING, 1) == (done.outcome, snap.status, snap.retry_count)
        assert (expected_at, expected_at) == (snap.retry_at, record.retry_at)
        assert clock.now() == record.committed_at
        assert ErrorInfo(type="Flaky", message="attempt retry") == snap.last_failure
        assert (None, 1) == (snap.error, snap.revision)

    async def test_exponential_delays_double_up_to_the_cap(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """With ``RetryPolicy.exponential(base, cap=…)`` the n-th retry MUST be scheduled
        ``min(base * 2**(n-1), cap)`` seconds after its commit.

        Troubleshooting: use ``RetryPolicy.delay_for(retry_count)`` with the count *after*
        the increment (the first retry waits ``base``).
        """
        held = await created_and_claimed(
            store, retry=RetryPolicy.exponential(2, attempts=10, cap=5)
        )
        delays = []
        for n in range(4):
            clock.advance(1)
            record = (await _retry(store, held, f"r{n}")).record
            assert record is not None
            assert record.retry_at is not None
            delays.append((record.retry_at - record.committed_at).total_seconds())
            clock.advance((record.retry_at - clock.now()).total_seconds())
            held = await claim(store, held.snapshot.id, worker=f"w{n}")
        assert [2.0, 4.0, 5.0, 5.0] == delays

    async def test_retry_requested_ends_the_lease(self, store: TaskStore) -> None:
        """A scheduled retry MUST end the requesting lease: the task reads ``pending`` and
        the lease is refused afterwards.

        Troubleshooting: end the lease at the commit instant in the same write
        (``rules.apply_event`` does), so the retry waits for ``retry_at`` only.
        """
        held = await created_and_claimed(store, retry=RetryPolicy.fixed(1, attempts=2))
        done = await _retry(store, held)
        assert TaskStatus.PENDING == done.snapshot.status
        with pytest.raises(LeaseLost):
            await store.renew(held.lease, LEASE_S)

    # -- deadlines ---------------------------------------------------------------------------

    async def test_exact_claim_before_retry_at_is_deferred(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim`` before ``retry_at`` MUST raise ``Deferred`` whose ``seconds`` is the
        time left until ``retry_at`` by the store clock, and claim nothing.

        Troubleshooting: check ``retry_at > now`` after the terminal/waiting/lease checks
        and raise ``Deferred((retry_at - now).total_seconds())``.
        """
        held = await created_and_claimed(store, retry=RetryPolicy.fixed(10, attempts=3))
        clock.advance(1)
        await _retry(store, held)
        clock.advance(3.25)
        with pytest.raises(Deferred) as caught:
            await claim(store, held.snapshot.id, worker="w2")
        assert pytest.approx(6.75, abs=1e-3) == caught.value.seconds
        assert 1 == (await store.get(held.snapshot.id, tenant=None)).deliveries

    async def test_claim_next_skips_retry_not_due(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim_next`` MUST skip a task until the store clock reaches its ``retry_at``
        and serve it from that instant on (an exact claim then succeeds too).

        Troubleshooting: the filter is ``retry_at IS NULL OR retry_at <= now``, evaluated
        on the store clock.
        """
        held = await created_and_claimed(store, retry=RetryPolicy.fixed(10, attempts=3))
        clock.advance(1)
        retry_at = (await _retry(store, held)).snapshot.retry_at
        assert retry_at is not None
        clock.advance((retry_at - clock.now()).total_seconds() - 0.001)
        assert [] == await store.claim_next("w2", LEASE_S, queues=["default"])
        clock.advance(0.001)
        [again] = await store.claim_next("w2", LEASE_S, queues=["default"])
        assert (held.snapshot.id, TaskStatus.RUNNING, 1, 2) == (
            again.snapshot.id, again.snapshot.status, again.snapshot.retry_count,
            again.snapshot.deliveries,
        )

    async def test_due_retry_is_claimable_exactly(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """An exact ``claim`` at ``retry_at`` MUST succeed with a new generation.

        Troubleshooting: ``Deferred`` only while ``retry_at > now``.
        """
        held = await created_and_claimed(store, retry=RetryPolicy.fixed(4, attempts=2))
        retry_at = (await _retry(store, held)).snapshot.retry_at
        assert retry_at is not None
        clock.advance((retry_at - clock.now()).total_seconds())
        again = await claim(store, held.snapshot.id, worker="w2")
        assert (2, TaskStatus.RUNNING) == (again.lease.generation, again.snapshot.status)

    # -- exhaustion ---------------------------------------------------------------------------

    async def test_exhausted_policy_fails_the_task_with_the_event_error(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """When the policy has no attempt left, the same ``retry_requested`` event MUST fail
        the task: status ``failed``, ``error`` taken from the event, no ``retry_at``, the
        lease ended.

        Troubleshooting: ``RetryPolicy.attempts`` counts every run, the first included:
        ``attempts=2`` allows one retry. Decide between retry and failure inside the same
        atomic step (``RetryPolicy.allows_retry(retry_count)``).
        """
        held = await created_and_claimed(store, retry=RetryPolicy.fixed(1, attempts=2))
        first = await _retry(store, held, "one")
        assert TaskStatus.PENDING == first.snapshot.status
        clock.advance(2)
        held = await claim(store, held.snapshot.id, worker="w2")
        final = await _retry(store, held, "two")
        snap = final.snapshot
        assert ("applied", TaskStatus.FAILED) == (final.outcome, snap.status)
        assert ErrorInfo(type="Flaky", message="attempt two") == snap.error
        assert (1, None) == (snap.retry_count, snap.retry_at)
        assert final.record is not None
        assert snap.error == final.record.error
        assert [] == await store.claim_next("w3", LEASE_S, queues=["default"])

    async def test_no_retry_policy_fails_at_once(self, store: TaskStore) -> None:
        """Under ``RetryPolicy.none()`` the first ``retry_requested`` MUST fail the task.

        Troubleshooting: ``none`` never retries, whatever ``attempts`` says.
        """
        held = await created_and_claimed(store, retry=RetryPolicy.none())
        final = await _retry(store, held)
        assert (TaskStatus.FAILED, "Flaky", 0) == (
            final.snapshot.status,
            final.snapshot.error.type if final.snapshot.error else None,
            final.snapshot.retry_count,
        )

    # -- delivery limit -------------------------------------------------------------------------

    async def test_claim_past_the_delivery_limit_fails_the_task(
        self, store: TaskStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        """With ``max_deliveries=2``, after two claims whose leases expired, the third
        exact claim MUST fail the task (``DeliveryLimitExceeded``, "exceeded 2 deliveries",
        recorded as a ``failed`` event in history), report it once
        (``tasks_core.reports.delivery_limit``) and raise ``Unavailable``.

        Troubleshooting: compare ``deliveries`` with ``work.max_deliveries`` before issuing a
        lease and, when reached, apply the ``failed`` event from ``rules.start_claim`` in the
        same atomic step; then refuse the claim. Call ``tasks_core.reports.delivery_limit`` once
        that failure is written: no worker sees the task, and a poison task must not end
        silently.
        """
        created = await store.create(new_task(max_deliveries=2))
        await _expire(store, clock, created.id, "w1")
        await _expire(store, clock, created.id, "w2")
        with caplog.at_level("WARNING", logger="tasks_core.worker"), pytest.raises(Unavailable):
            await claim(store, created.id, worker="w3")
        assert 1 == len(_delivery_limit_reports(caplog, created.id))
        failed = await store.get(created.id, tenant=None)
        assert (TaskStatus.FAILED, 2) == (failed.status, failed.deliveries)
        assert ErrorInfo(type=DELIVERY_LIMIT_ERROR, message="exceeded 2 deliveries") == failed.error
        [record] = await store.history(created.id, tenant=None)
        assert ("failed", TaskStatus.FAILED, failed.error) == (
            record.kind, record.status, record.error
        )
        with pytest.raises(Unavailable):
            await claim(store, created.id, worker="w4")

    async def test_claim_next_fails_a_task_past_the_delivery_limit_instead_of_serving_it(
        self, store: TaskStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        """``claim_next`` MUST NOT return a task past its delivery limit: it fails the task
        (``DeliveryLimitExceeded``, reported once, recorded as a ``failed`` event in
        history, as ``claim`` does) and serves the next claimable task instead.

        Troubleshooting: a poison task must not loop forever; do not count the failed task
        against ``limit``; write the ``failed`` event's record with the failure, in the same
        atomic step (the plan's record).
        """
        poison = await store.create(new_task(max_deliveries=2))
        await _expire(store, clock, poison.id, "w1")
        await _expire(store, clock, poison.id, "w2")
        healthy = await store.create(new_task())
        with caplog.at_level("WARNING", logger="tasks_core.worker"):
            got = await store.claim_next("w3", LEASE_S, queues=["default"], limit=1)
        assert [healthy.id] == [c.snapshot.id for c in got]
        assert 1 == len(_delivery_limit_reports(caplog, poison.id))
        failed = await store.get(poison.id, tenant=None)
        assert (TaskStatus.FAILED, DELIVERY_LIMIT_ERROR) == (
            failed.status, failed.error.type if failed.error else None
        )
        records = await store.history(poison.id, tenant=None)
        assert [("failed", TaskStatus.FAILED, failed.error)] == [
            (r.kind, r.status, r.error) for r in records
        ], "the failure claim_next wrote is missing from the task's history"

    async def test_released_deliveries_count_towards_the_limit(self, store: TaskStore) -> None:
        """Deliveries ended by ``release`` MUST count towards ``max_deliveries`` too.

        Troubleshooting: never decrement ``deliveries`` on release; a task released on
        every run would otherwise run forever.
        """
        created = await store.create(new_task(max_deliveries=2))
        for worker in ("w1", "w2"):
            await store.release((await claim(store, created.id, worker=worker)).lease)
        with pytest.raises(Unavailable):
            await claim(store, created.id, worker="w3")
        assert TaskStatus.FAILED == (await store.get(created.id, tenant=None)).status

    async def test_crash_redelivery_does_not_consume_the_retry_policy(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A claim after lease expiry (crash redelivery) MUST count a delivery but keep
        ``retry_count`` at 0 and schedule no ``retry_at``.

        Troubleshooting: only a ``retry_requested`` event touches the retry fields.
        """
        created = await store.create(new_task(retry=RetryPolicy.fixed(5, attempts=2)))
        await _expire(store, clock, created.id, "w1")
        [again] = await store.claim_next("w2", LEASE_S, queues=["default"])
        assert (0, None, 2) == (
            again.snapshot.retry_count, again.snapshot.retry_at, again.snapshot.deliveries
        )


def _delivery_limit_reports(caplog: pytest.LogCaptureFixture, task_id: str) -> list[str]:
    """The warnings ``tasks_core.reports.delivery_limit`` logged about ``task_id``."""
    return [r.getMessage() for r in caplog.records
            if r.name == "tasks_core.worker" and r.levelname == "WARNING"
            and repr(task_id) in r.getMessage() and "exceeded 2 deliveries" in r.getMessage()]
