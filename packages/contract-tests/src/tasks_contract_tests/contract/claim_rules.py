"""What a claim serves and what it records: cancelled tasks are never served, a busy
exclusive queue holds back only itself (and a cancelled task's live lease keeps it busy), a
takeover is marked ``recovered`` and
``started_at`` is the first start."""

from __future__ import annotations

import pytest
from tasks_core import (
    Cancelled,
    CancelReason,
    Claim,
    ManualClock,
    TaskStatus,
    TaskStore,
    Unavailable,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import ALICE, LEASE_S, access, claim, new_task


def _ids(claims: list[Claim]) -> list[str]:
    return [c.snapshot.id for c in claims]


class ClaimRuleContract(ContractBase):
    """Which tasks a claim serves, and what it records about the claim."""

    @pytest.mark.parametrize("when", ["pending", "lapsed_lease"])
    async def test_a_cancelled_task_is_never_claimed(
        self, store: TaskStore, clock: ManualClock, when: str
    ) -> None:
        """A cancelled task MUST NOT be claimed — neither one cancelled while pending, nor
        one cancelled under a lease that then lapsed: ``claim_next`` passes over it (and
        serves the claimable task behind it) and ``claim`` raises ``Unavailable``.

        Troubleshooting: the claimable condition starts with "not terminal"
        (``rules.is_claimable``) and holds for every kind of candidate: a recovery query
        for lapsed leases that tests only the lease's expiry, or a status filter that
        lists ``completed`` and ``failed`` but forgets ``cancelled``, re-runs a task its
        owner cancelled.
        """
        cancelled = await store.create(new_task())
        if when == "lapsed_lease":
            await claim(store, cancelled.id, worker="w0")
        done = await store.transition(cancelled.id, 0, Cancelled(event_id="stop"),
                                      access(ALICE))
        assert TaskStatus.CANCELLED == done.snapshot.status
        clock.advance(LEASE_S + 1)  # the lease (if any) lapsed; the cancel stays
        ready = await store.create(new_task())
        got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=5)
        assert [ready.id] == _ids(got)
        with pytest.raises(Unavailable):
            await claim(store, cancelled.id, worker="w2")
        stored = await store.get(cancelled.id, tenant=None)
        assert (TaskStatus.CANCELLED, CancelReason.USER, done.snapshot.deliveries) == (
            stored.status, stored.cancel_reason, stored.deliveries)

    async def test_a_busy_exclusive_queue_holds_back_only_itself(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """While an exclusive queue is busy (a task of it holds a live lease from an
        earlier call), ``claim_next(queues=[q, other], exclusive=[q])`` MUST still serve
        the other queues of the call, up to ``limit``, and nothing of ``q``.

        Troubleshooting: leave the busy queue out of the candidates (``queue NOT IN
        busy``); do not return early from the whole call because one of its exclusive
        queues is busy.
        """
        if not store.capabilities.exclusive_queues:
            pytest.skip("store capability 'exclusive_queues' is off")
        serial = []
        for _ in range(2):
            serial.append((await store.create(new_task(queue="serial"))).id)
            clock.advance(0.001)
        await claim(store, serial[0], worker="w0")
        bulk = [(await store.create(new_task(queue="bulk"))).id for _ in range(3)]
        got = await store.claim_next(
            "w1", LEASE_S, queues=["serial", "bulk"], limit=10, exclusive=["serial"]
        )
        assert sorted(bulk) == sorted(_ids(got))

    async def test_a_cancelled_task_holds_its_exclusive_queue_while_its_lease_lives(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A task cancelled under a live lease MUST keep its exclusive queue busy until
        that lease expires (its holder may still be running it): at 1 ms before the
        expiry ``claim_next(exclusive=[q])`` serves nothing of ``q``, at the expiry it
        serves the next task.

        Troubleshooting: a queue is busy while one of its tasks holds a lease that has
        neither ended nor expired, whatever its status (``storekit.holds_queue``); a
        filter on ``status = 'running'`` lets a second worker in beside the first.
        """
        if not store.capabilities.exclusive_queues:
            pytest.skip("store capability 'exclusive_queues' is off")
        cancelled = await store.create(new_task(queue="serial"))
        clock.advance(0.001)
        waiting = await store.create(new_task(queue="serial"))
        held = await claim(store, cancelled.id, worker="w0")
        done = await store.transition(cancelled.id, held.snapshot.revision,
                                      Cancelled(event_id="stop"), access(ALICE))
        assert TaskStatus.CANCELLED == done.snapshot.status
        clock.advance(LEASE_S - 0.001)
        assert [] == await store.claim_next("w1", LEASE_S, queues=["serial"],
                                            exclusive=["serial"])
        clock.advance(0.001)
        got = await store.claim_next("w1", LEASE_S, queues=["serial"], exclusive=["serial"])
        assert [waiting.id] == _ids(got)

    async def test_a_takeover_of_a_lapsed_lease_is_marked_recovered(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A claim that takes over a lease which expired without ending MUST be marked
        ``claim.recovered`` (in the claim's snapshot and in what ``get`` reads), by
        ``claim_next`` and by ``claim`` alike; a first claim and a claim after a
        ``release`` MUST NOT be.

        Troubleshooting: set ``recovered`` when the previous claim exists and has not
        ``ended`` (``rules.start_claim``). Without it the runtime's ``recover="fail"``
        cannot tell a crashed worker's task from one handed back, and runs the crashed
        one again.
        """
        created = await store.create(new_task(max_deliveries=10))
        first = await claim(store, created.id, worker="w1")
        await store.release(first.lease)
        after_release = await claim(store, created.id, worker="w2")
        clock.advance(LEASE_S)
        [taken_over] = await store.claim_next("w3", LEASE_S, queues=["default"])
        read = await store.get(created.id, tenant=None)
        clock.advance(LEASE_S)
        exact = await claim(store, created.id, worker="w4")
        flags = [c.snapshot.claim.recovered if c.snapshot.claim else None
                 for c in (first, after_release, taken_over, exact)]
        assert [False, False, True, True] == flags
        assert read.claim is not None
        assert (True, "w3") == (read.claim.recovered, read.claim.worker_id)

    async def test_started_at_is_the_instant_of_the_first_claim(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``started_at`` MUST be unset until the first claim, then be that claim's
        instant (in the claim's snapshot and in what ``get`` reads) and stay so through a
        release, a lapsed lease and every later claim.

        Troubleshooting: set it with ``started_at = COALESCE(started_at, now)`` in the
        claiming write (``rules.start_claim``): overwriting it on every claim loses when
        the task first ran; never setting it leaves readers without it.
        """
        created = await store.create(new_task(max_deliveries=10))
        assert created.started_at is None
        clock.advance(2)
        started = clock.now()
        first = await claim(store, created.id, worker="w1")
        assert (await store.get(created.id, tenant=None)).started_at == started
        clock.advance(3)
        await store.release(first.lease)
        second = await claim(store, created.id, worker="w2")
        clock.advance(LEASE_S + 4)
        [third] = await store.claim_next("w3", LEASE_S, queues=["default"])
        seen = [c.snapshot.started_at for c in (first, second, third)]
        assert [started] * 3 == seen
        assert started == (await store.get(created.id, tenant=None)).started_at
