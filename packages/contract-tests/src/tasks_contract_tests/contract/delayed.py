"""Delayed tasks: a task created with ``delay_s`` or ``run_at`` is available from its
``run_at`` on the store clock — never served early, read ``scheduled`` until then, served
by its available instant among the others, cancellable while it waits — and
``next_available`` tells an idle worker when the next waiting task falls due."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tasks_core import (
    Cancelled,
    Claim,
    Deferred,
    InvalidInput,
    ManualClock,
    RetryPolicy,
    RetryRequested,
    TaskQuery,
    TaskStatus,
    TaskStore,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import ALICE, LEASE_S, access, new_task


def _ids(claims: list[Claim]) -> list[str]:
    return [claim.snapshot.id for claim in claims]


class DelayedContract(ContractBase):
    """Delayed tasks: ``run_at``, the available instant, and ``next_available``."""

    async def test_a_delay_counts_from_the_store_clock_at_creation(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``create`` of a task with ``delay_s`` MUST set ``run_at`` to the store's ``now``
        at creation plus the delay (whole milliseconds), and the task MUST read
        ``scheduled`` until then.

        Troubleshooting: build the snapshot with ``rules.new_snapshot(new, now)`` where
        ``now`` is the store clock read inside the create — never a client's clock.
        """
        clock.advance(12.3456)
        created = await store.create(new_task(delay_s=30.25))
        assert created.created_at + timedelta(seconds=30.25) == created.run_at
        assert timedelta(0) <= clock.now() - created.created_at < timedelta(milliseconds=1)
        stored = await store.get(created.id, tenant=None)
        assert (TaskStatus.SCHEDULED, created.run_at) == (stored.status, stored.run_at)

    async def test_create_returns_a_delayed_task_as_stored_pending(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``create`` and ``create_many`` (capability ``batch_create``) MUST return a
        delayed task as stored — ``pending``, its ``run_at`` ahead — while ``get`` at that
        instant reads it ``scheduled``.

        Troubleshooting: return the snapshot ``rules.new_snapshot`` built, not
        ``rules.present(snapshot, now)``: only reads derive ``scheduled``
        (docs/contract.md, "Error order and what reads return").
        """
        created = [await store.create(new_task(delay_s=30)),
                   await store.create(new_task(run_at=clock.now() + timedelta(seconds=5)))]
        if store.capabilities.batch_create:
            created += await store.create_many([new_task(delay_s=60), new_task(delay_s=1)])
        assert [TaskStatus.PENDING] * len(created) == [s.status for s in created]
        assert all(s.run_at is not None and s.run_at > clock.now() for s in created)
        read = [await store.get(s.id, tenant=None) for s in created]
        assert [TaskStatus.SCHEDULED] * len(created) == [s.status for s in read]

    async def test_a_delayed_task_is_never_served_early(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim_next`` MUST pass a delayed task over until the store clock reaches its
        ``run_at``, and serve it from that instant on; an exact ``claim`` before it MUST
        raise ``Deferred`` with the seconds left, claiming nothing.

        Troubleshooting: a candidate's available instant (``rules.available_at``) must
        not lie after ``now``; ``storekit.is_candidate`` and ``claim_one`` say so.
        """
        created = await store.create(new_task(delay_s=10))
        clock.advance(9.999)
        assert [] == await store.claim_next("w1", LEASE_S, queues=["default"], limit=5)
        with pytest.raises(Deferred) as caught:
            await store.claim(created.id, "w1", LEASE_S)
        assert pytest.approx(0.001, abs=1e-6) == caught.value.seconds
        stored = await store.get(created.id, tenant=None)
        assert (0, None) == (stored.deliveries, stored.claim)
        clock.advance(0.001)
        got = await store.claim_next("w1", LEASE_S, queues=["default"])
        assert [created.id] == _ids(got)
        assert TaskStatus.RUNNING == got[0].snapshot.status

    async def test_run_at_makes_a_task_available_then_and_a_past_one_at_once(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A ``run_at`` ahead MUST be kept as given, rounded up to the millisecond (never
        served early); one already past MUST become the creation instant, the task
        claimable at once.

        Troubleshooting: ``rules.new_snapshot`` clamps ``run_at`` to ``now``.
        """
        ahead = clock.now() + timedelta(seconds=90, microseconds=123456)
        later = await store.create(new_task(run_at=ahead))
        assert ahead.replace(microsecond=124000) == later.run_at
        exact = ahead.replace(microsecond=125000)
        assert exact == (await store.create(new_task(run_at=exact))).run_at
        past = await store.create(new_task(run_at=clock.now() - timedelta(days=3)))
        assert past.created_at == past.run_at
        assert TaskStatus.PENDING == (await store.get(past.id, tenant=None)).status
        got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=5)
        assert [past.id] == _ids(got)

    async def test_claim_next_serves_by_available_instant_then_id(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim_next`` MUST serve candidates by available instant — ``run_at`` for a
        delayed task, the creation otherwise — then by id, whatever their creation order.

        Troubleshooting: order by ``storekit.claim_order`` (available instant, id); an
        index on creation alone serves the wrong order.
        """
        start = clock.now()
        late = await store.create(new_task("zz-late", delay_s=10))    # available T+10
        clock.advance(1)
        plain = await store.create(new_task("zz-plain"))              # available T+1
        clock.advance(1)
        early = await store.create(new_task("zz-early", run_at=start + timedelta(seconds=5)))
        tie = await store.create(new_task("zz-tie", delay_s=3))       # T+5, after "early"
        clock.advance(20)
        got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=10)
        assert [plain.id, early.id, tie.id, late.id] == _ids(got)

    async def test_a_scheduled_task_is_listed_as_scheduled_and_can_be_cancelled(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A waiting delayed task MUST be listed under ``scheduled`` (and not under
        ``pending``); its owner MUST be able to cancel it, after which it is never
        served, even once its ``run_at`` has passed.

        Troubleshooting: ``rules.present`` derives ``scheduled``; a listing by a derived
        status reads stored ``pending`` rows and keeps those ``rules.matches``.
        """
        waiting = await store.create(new_task(delay_s=60))
        due = await store.create(new_task())
        listed = await store.list(TaskQuery(tenant=None, statuses=frozenset(
            {TaskStatus.SCHEDULED})))
        pending = await store.list(TaskQuery(tenant=None, statuses=frozenset(
            {TaskStatus.PENDING})))
        assert ([waiting.id], [due.id]) == ([s.id for s in listed], [s.id for s in pending])
        done = await store.transition(waiting.id, 0, Cancelled(event_id="stop"),
                                      access(ALICE))
        assert (done.outcome, done.snapshot.status) == ("applied", TaskStatus.CANCELLED)
        clock.advance(120)
        got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=5)
        assert [due.id] == _ids(got)

    async def test_ttl_of_a_delayed_task_counts_from_its_run_at(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A delayed task's ``ttl`` MUST count from its ``run_at`` (a task cannot expire
        before it may run): ``expires_at = run_at + ttl``.

        Troubleshooting: ``rules.ttl_end``.
        """
        created = await store.create(new_task(delay_s=100, ttl_s=5))
        assert created.run_at is not None
        assert created.run_at + timedelta(seconds=5) == created.expires_at
        clock.advance(102)
        got = await store.claim_next("w1", LEASE_S, queues=["default"])
        assert [created.id] == _ids(got)

    async def test_at_its_run_at_a_delayed_task_is_no_longer_ahead(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``next_available`` MUST return a delayed task's ``run_at`` up to 1 ms before it
        and ``None`` at that very instant, when ``claim_next`` serves it.

        Troubleshooting: compare strictly (``run_at > now``): at its instant the task is
        available, not ahead.
        """
        delayed = await store.create(new_task(delay_s=50))
        clock.advance(49.999)
        assert delayed.run_at == await store.next_available(["default"])
        clock.advance(0.001)
        assert await store.next_available(["default"]) is None
        got = await store.claim_next("w1", LEASE_S, queues=["default"])
        assert [delayed.id] == [c.snapshot.id for c in got]

    async def test_next_available_is_the_earliest_waiting_instant_of_the_queues(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``next_available(queues)`` MUST return the earliest available instant after
        ``now`` of a waiting task of those queues — a delayed task's ``run_at`` or a
        retry's ``retry_at`` — and ``None`` once none waits; other queues' tasks, tasks
        already available and cancelled tasks MUST NOT count.

        Troubleshooting: read pending tasks without a live lease whose available instant
        lies ahead (SQL: the claim index's range past ``now``), minimum over the queues.
        """
        assert await store.next_available(["default"]) is None
        await store.create(new_task())
        other = await store.create(new_task(queue="other", delay_s=5))
        cancelled = await store.create(new_task(delay_s=2))
        await store.transition(cancelled.id, 0, Cancelled(event_id="stop"), access(ALICE))
        far = await store.create(new_task(delay_s=50))
        retried = await store.create(new_task(retry=RetryPolicy.fixed(30, attempts=2)))
        held = await store.claim(retried.id, "w0", LEASE_S)
        done = await store.transition(retried.id, held.snapshot.revision,
                                      RetryRequested(event_id="again", error="E"), held.lease)
        assert done.snapshot.retry_at is not None
        assert done.snapshot.retry_at == await store.next_available(["default", "missing"])
        assert other.run_at == await store.next_available(["other"])
        clock.advance(31)
        assert far.run_at == await store.next_available(["default"])
        clock.advance(20)
        assert await store.next_available(["default"]) is None
        with pytest.raises(InvalidInput):
            await store.next_available([])
