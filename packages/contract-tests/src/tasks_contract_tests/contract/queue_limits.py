"""Fleet-wide queue limits (capability ``queue_limits``): ``claim_next(limits={queue:
QueueLimits(max_running=N, rate=(N, S))})`` never leaves more live leases in the queue
than ``max_running`` nor more claims in any window than ``rate`` allows — counted in the
claim's atomic step, proven by racers on warm connections — and a refused claim leaves
the task pending."""

from __future__ import annotations

from functools import partial

import pytest
from tasks_core import (
    Cancelled,
    Claim,
    Completed,
    InvalidInput,
    ManualClock,
    TaskQuery,
    TaskStatus,
    TaskStore,
)
from tasks_core.storekit import QueueLimits

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import ALICE, LEASE_S, access, new_task
from tasks_contract_tests.contract.warm_races import RACERS, Call, N, Racer

Q = "limited"


def _ids(claims: list[Claim]) -> list[str]:
    return [claim.snapshot.id for claim in claims]


async def _tasks(store: TaskStore, clock: ManualClock, count: int, queue: str = Q) -> list[str]:
    ids = []
    for _ in range(count):
        ids.append((await store.create(new_task(queue=queue))).id)
        clock.advance(0.001)
    return ids


def _require(store: TaskStore) -> None:
    if not store.capabilities.queue_limits:
        pytest.skip("store capability 'queue_limits' is off")


async def _live(store: TaskStore, queue: str = Q) -> list[str]:
    statuses = frozenset({TaskStatus.RUNNING, TaskStatus.CLAIMED})
    listed = await store.list(TaskQuery(tenant=None, statuses=statuses, queue=queue))
    return sorted(snapshot.id for snapshot in listed)


class QueueLimitContract(ContractBase):
    """``claim_next(limits=…)``: fleet-wide ``max_running`` and ``rate``."""

    async def test_max_running_bounds_the_live_leases_of_the_queue(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """With ``max_running=2`` a call MUST claim at most 2 of the queue, oldest first;
        while both leases live no call claims more (the tasks stay pending); an ended
        lease makes room for one more.

        Troubleshooting: count the queue's live leases (``storekit.holds_queue``) in the
        claim's atomic step and pass them as ``ClaimScan(running=…)``.
        """
        _require(store)
        ids = await _tasks(store, clock, 4)
        limits = {Q: QueueLimits(max_running=2)}
        first = await store.claim_next("w1", LEASE_S, queues=[Q], limit=5, limits=limits)
        assert ids[:2] == _ids(first)
        assert [] == await store.claim_next("w2", LEASE_S, queues=[Q], limit=5, limits=limits)
        waiting = await store.get(ids[2], tenant=None)
        assert (TaskStatus.PENDING, 0) == (waiting.status, waiting.deliveries)
        done = first[0]
        await store.transition(done.snapshot.id, done.snapshot.revision,
                               Completed(event_id="done"), done.lease)
        again = await store.claim_next("w2", LEASE_S, queues=[Q], limit=5, limits=limits)
        assert [ids[2]] == _ids(again)

    async def test_a_lapsed_lease_frees_its_place(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A lease that expired without ending MUST no longer count toward
        ``max_running``: its task (recovered) or another takes the place.

        Troubleshooting: count leases whose expiry lies after ``now``, not every claim.
        """
        _require(store)
        ids = await _tasks(store, clock, 2)
        limits = {Q: QueueLimits(max_running=1)}
        await store.claim_next("w1", 2, queues=[Q], limits=limits)
        assert [] == await store.claim_next("w2", LEASE_S, queues=[Q], limits=limits)
        clock.advance(2)
        again = await store.claim_next("w2", LEASE_S, queues=[Q], limits=limits)
        assert [ids[0]] == _ids(again)
        assert again[0].snapshot.claim is not None
        assert again[0].snapshot.claim.recovered

    async def test_a_cancelled_task_keeps_its_place_while_its_holder_renews(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A task cancelled under a live lease MUST keep counting toward ``max_running``
        while its holder renews that lease (its handler may still run: a worker on a
        limited queue holds the lease until the handler returns), and free its place when
        the holder releases it.

        Troubleshooting: count leases neither ended nor expired, whatever the task's
        status (``storekit.holds_queue``); ``renew`` checks the lease, not the status.
        """
        _require(store)
        ids = await _tasks(store, clock, 2)
        limits = {Q: QueueLimits(max_running=1, rate=(100, 60))}
        [held] = await store.claim_next("w1", LEASE_S, queues=[Q], limits=limits)
        await store.transition(ids[0], held.snapshot.revision, Cancelled(event_id="stop"),
                               access(ALICE))
        clock.advance(LEASE_S - 0.001)
        renewed = await store.renew(held.lease, LEASE_S)
        clock.advance(LEASE_S - 0.001)
        assert [] == await store.claim_next("w2", LEASE_S, queues=[Q], limits=limits)
        await store.release(renewed.lease)
        again = await store.claim_next("w2", LEASE_S, queues=[Q], limits=limits)
        assert [ids[1]] == _ids(again)

    async def test_a_full_queue_leaves_the_call_its_other_queues(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A limited queue without room MUST NOT keep the same call from claiming the
        tasks of its other queues.

        Troubleshooting: close only the full queue (``ClaimScan.open_queues``).
        """
        _require(store)
        await _tasks(store, clock, 2)
        other = await _tasks(store, clock, 2, queue="free")
        limits = {Q: QueueLimits(max_running=1)}
        await store.claim_next("w1", LEASE_S, queues=[Q], limits=limits)
        got = await store.claim_next("w2", LEASE_S, queues=[Q, "free"], limit=5,
                                     limits=limits)
        assert other == _ids(got)

    async def test_a_limited_queue_is_served_up_to_its_room_in_claim_order(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """With ``max_running=3`` and three tasks of the queue older than a task of
        another queue, ``claim_next(limit=3)`` over both MUST claim the three of the
        limited queue — its whole room — and not the newer task.

        Troubleshooting: take up to ``ClaimScan.room(queue)`` candidates of each limited
        queue, in claim order across the queues; closing a queue before its room is used
        lets a newer task of another queue in first.
        """
        _require(store)
        ids = await _tasks(store, clock, 3)
        await _tasks(store, clock, 1, queue="free")
        limits = {Q: QueueLimits(max_running=3)}
        got = await store.claim_next("w1", LEASE_S, queues=[Q, "free"], limit=3,
                                     limits=limits)
        assert ids == _ids(got)

    async def test_rate_bounds_the_claims_in_any_window(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """With ``rate=(2, 10)`` no window of 10 s (store clock) MUST hold more than 2
        claims of the queue — finished runs included: claims made at ``t`` keep the queue
        shut until ``t + 10``, and then 2 more may come.

        Troubleshooting: log each claim's instant per queue in the claim's atomic step
        and count those after ``now - window`` (``ClaimScan(recent=…)``; write
        ``ClaimScan.claimed(queue)`` entries).
        """
        _require(store)
        ids = await _tasks(store, clock, 5)
        limits = {Q: QueueLimits(rate=(2, 10))}
        first = await store.claim_next("w1", LEASE_S, queues=[Q], limit=5, limits=limits)
        assert ids[:2] == _ids(first)
        for claim in first:
            await store.transition(claim.snapshot.id, claim.snapshot.revision,
                                   Completed(event_id="done"), claim.lease)
        clock.advance(9.999)
        assert [] == await store.claim_next("w1", LEASE_S, queues=[Q], limit=5,
                                            limits=limits)
        clock.advance(0.001)
        again = await store.claim_next("w1", LEASE_S, queues=[Q], limit=5, limits=limits)
        assert ids[2:4] == _ids(again)

    async def test_a_shorter_window_asked_meanwhile_keeps_the_longer_ones_claims(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """Callers may ask different rates of one queue: a claim made under
        ``rate=(1, 60)`` MUST still shut the queue to that rate 30 s later, though a call
        with ``rate=(5, 10)`` came between (and claimed nothing).

        Troubleshooting: keep each queue's claim instants as long as the longest window
        any caller asked for, not the last caller's.
        """
        _require(store)
        await _tasks(store, clock, 1)
        await store.create(new_task(queue=Q, delay_s=25))
        long = {Q: QueueLimits(rate=(1, 60))}
        assert 1 == len(await store.claim_next("w1", LEASE_S, queues=[Q], limits=long))
        clock.advance(20)
        short = {Q: QueueLimits(rate=(5, 10))}
        assert [] == await store.claim_next("w2", LEASE_S, queues=[Q], limits=short)
        clock.advance(10)
        assert [] == await store.claim_next("w3", LEASE_S, queues=[Q], limits=long)
        assert 1 == len(await store.claim_next("w3", LEASE_S, queues=[Q], limits=short))

    async def test_max_running_and_rate_together_take_the_tighter(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """With both limits a call MUST claim no more than the tighter of them allows.

        Troubleshooting: ``storekit.QueueRoom`` takes the minimum.
        """
        _require(store)
        ids = await _tasks(store, clock, 6)
        limits = {Q: QueueLimits(max_running=3, rate=(5, 60))}
        first = await store.claim_next("w1", LEASE_S, queues=[Q], limit=6, limits=limits)
        assert ids[:3] == _ids(first)
        for claim in first:
            await store.transition(claim.snapshot.id, claim.snapshot.revision,
                                   Completed(event_id="done"), claim.lease)
        second = await store.claim_next("w1", LEASE_S, queues=[Q], limit=6, limits=limits)
        assert ids[3:5] == _ids(second)

    async def test_exclusive_is_max_running_one_and_takes_a_rate(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A queue given in ``exclusive`` and in ``limits`` with a rate MUST be bounded
        by both: one live lease, and the rate.

        Troubleshooting: ``storekit.check_claim_next`` merges them.
        """
        _require(store)
        ids = await _tasks(store, clock, 3)
        limits = {Q: QueueLimits(rate=(1, 60))}
        first = await store.claim_next("w1", LEASE_S, queues=[Q], limit=3, exclusive=[Q],
                                       limits=limits)
        assert ids[:1] == _ids(first)
        await store.transition(first[0].snapshot.id, first[0].snapshot.revision,
                               Completed(event_id="done"), first[0].lease)
        assert [] == await store.claim_next("w1", LEASE_S, queues=[Q], exclusive=[Q],
                                            limits=limits)

    @pytest.mark.parametrize("limits", [{Q: 3}, {Q: {"max_running": 1}}, ["limited"],
                                        {"": QueueLimits(max_running=1)}])
    async def test_bad_limits_are_refused_before_anything_is_claimed(
        self, store: TaskStore, clock: ManualClock, limits: object
    ) -> None:
        """``limits`` that is not a mapping of queue names to ``QueueLimits`` MUST raise
        ``InvalidInput`` and claim nothing.

        Troubleshooting: ``storekit.check_claim_next(..., limits)`` first.
        """
        _require(store)
        await _tasks(store, clock, 1)
        with pytest.raises(InvalidInput):
            await store.claim_next("w1", LEASE_S, queues=[Q], limits=limits)  # type: ignore[arg-type]
        assert [] == await _live(store)

    @RACERS
    async def test_racing_claims_never_pass_max_running(
        self, store: TaskStore, clock: ManualClock, race: Racer
    ) -> None:
        """N workers racing ``claim_next(limit=2)`` on a queue with ``max_running=3``
        MUST leave exactly 3 live leases between them, on the 3 oldest tasks.

        Troubleshooting: counting the live leases and claiming are one atomic step (a
        lock on a per-queue row held to the commit); counting first and claiming after
        hands every racer the whole room.
        """
        _require(store)
        ids = await _tasks(store, clock, 2 * N)
        limits = {Q: QueueLimits(max_running=3)}
        calls: list[Call] = [
            partial(store.claim_next, f"w{n}", LEASE_S, queues=[Q], limit=2, limits=limits)
            for n in range(N)
        ]
        results = await race(store, calls)
        assert [] == [r for r in results if isinstance(r, BaseException)]
        assert sorted(ids[:3]) == await _live(store)

    @RACERS
    async def test_racing_claims_never_pass_the_rate(
        self, store: TaskStore, clock: ManualClock, race: Racer
    ) -> None:
        """N workers racing ``claim_next(limit=2)`` on a queue with ``rate=(3, 60)`` MUST
        claim 3 tasks between them in that window, no more.

        Troubleshooting: read the window's count and log the new claims in the claim's
        atomic step, under the queue's lock.
        """
        _require(store)
        await _tasks(store, clock, 2 * N)
        limits = {Q: QueueLimits(rate=(3, 60))}
        calls: list[Call] = [
            partial(store.claim_next, f"w{n}", LEASE_S, queues=[Q], limit=2, limits=limits)
            for n in range(N)
        ]
        results = await race(store, calls)
        assert [] == [r for r in results if isinstance(r, BaseException)]
        assert 3 == sum(len(r) for r in results)
