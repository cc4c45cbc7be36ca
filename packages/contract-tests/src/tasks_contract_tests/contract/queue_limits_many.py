"""Queue limits across several limited queues in one call (capability ``queue_limits``):
a worker serving several limited queues passes all their limits to one ``claim_next``
(the runtime does), and each queue MUST be held to its own limit by its own count — its
own live leases, its own claims in its own window — never another queue's, nor the
call's queues taken together."""

from __future__ import annotations

from tasks_core import Completed, ManualClock, TaskStore
from tasks_core.storekit import QueueLimits

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import LEASE_S
from tasks_contract_tests.contract.queue_limits import _ids, _live, _require, _tasks

A, B, C, FREE = "limited-a", "limited-b", "limited-c", "free"
"""Three limited queues and an unlimited one; a call names them in an order other than
their sorted one, so counts read back by position land on the wrong queue."""


class ManyQueueLimitContract(ContractBase):
    """``claim_next(limits=…)`` over several limited queues: each by its own count."""

    async def test_each_queue_is_held_to_its_own_max_running_in_one_call(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """One ``claim_next`` over three limited queues — ``max_running`` 3, 1 and 2,
        holding 2, 1 and 0 live leases (the third's one run ended) — and an unlimited
        queue MUST claim 1, 0 and 2 of them, oldest first, and the unlimited queue's
        task: each queue's room is its own limit minus its own live leases.

        Troubleshooting: count the live leases of each limited queue apart
        (``storekit.holds_queue``, SQL: ``WHERE queue = …`` per queue, or ``GROUP BY
        queue`` read back by the queue's name — never zipped onto the names by
        position, the rows come in any order) and pass them as ``ClaimScan(running=
        {queue: count})``; a total over the call's queues shuts them all.
        """
        _require(store)
        a = await _tasks(store, clock, 5, A)
        b = await _tasks(store, clock, 3, B)
        c = await _tasks(store, clock, 3, C)
        free = await _tasks(store, clock, 2, FREE)
        limits = {A: QueueLimits(max_running=3), B: QueueLimits(max_running=1),
                  C: QueueLimits(max_running=2)}
        held = await store.claim_next("w1", LEASE_S, queues=[A], limit=2,
                                      limits={A: limits[A]})
        assert a[:2] == _ids(held)
        assert b[:1] == _ids(await store.claim_next("w1", LEASE_S, queues=[B],
                                                    limits={B: limits[B]}))
        [ended] = await store.claim_next("w1", LEASE_S, queues=[C], limits={C: limits[C]})
        await store.transition(ended.snapshot.id, ended.snapshot.revision,
                               Completed(event_id="done"), ended.lease)
        assert free[:1] == _ids(await store.claim_next("w1", LEASE_S, queues=[FREE]))
        got = await store.claim_next("w2", LEASE_S, queues=[C, FREE, B, A], limit=20,
                                     limits=limits)
        assert sorted([a[2], c[1], c[2], free[1]]) == _ids(got)
        assert (a[:3], b[:1], c[1:]) == (await _live(store, A), await _live(store, B),
                                         await _live(store, C))
        assert [] == await store.claim_next("w3", LEASE_S, queues=[A, B, C], limit=20,
                                            limits=limits)

    async def test_each_queue_is_held_to_its_own_rate_in_one_call(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """Three queues with ``rate`` (3, 60), (1, 30) and (2, 10): claims of one queue
        MUST NOT count in another's window — after 2 claims of the first, the second
        still claims its 1 and the third 1 — and 10 s later one ``claim_next`` over the
        three MUST claim 1, 0 and 2 of them (the third's claim made exactly 10 s ago is
        out of its window), oldest first.

        Troubleshooting: count each rate-limited queue's claims apart, in its own window
        (``ClaimScan(recent={queue: count})``, SQL: ``WHERE queue = …``, or ``GROUP BY
        queue`` read back by the queue's name, never by position), strictly after its
        own ``QueueLimits.window_start(now)``; a count over every queue's claims shuts a
        queue that never claimed.
        """
        _require(store)
        a = await _tasks(store, clock, 6, A)
        b = await _tasks(store, clock, 3, B)
        c = await _tasks(store, clock, 4, C)
        limits = {A: QueueLimits(rate=(3, 60)), B: QueueLimits(rate=(1, 30)),
                  C: QueueLimits(rate=(2, 10))}
        first = {
            queue: _ids(await store.claim_next("w1", LEASE_S, queues=[queue], limit=n,
                                               limits={queue: limits[queue]}))
            for queue, n in ((A, 2), (B, 5), (C, 1))
        }
        assert {A: a[:2], B: b[:1], C: c[:1]} == first
        clock.advance(10)
        got = await store.claim_next("w2", LEASE_S, queues=[C, B, A], limit=20,
                                     limits=limits)
        assert sorted([a[2], c[1], c[2]]) == _ids(got)
        assert [] == await store.claim_next("w3", LEASE_S, queues=[A, B, C], limit=20,
                                            limits=limits)

    async def test_max_running_and_rate_of_different_queues_stay_apart(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """In one call, a queue with ``max_running=2`` holding 1 live lease and a queue
        with ``rate=(3, 60)`` that claimed 2 (their runs ended) MUST claim 1 each: the
        rate's claims are not the other's leases, nor the reverse.

        Troubleshooting: key ``running`` and ``recent`` by queue name, each read only for
        the queues with that limit (``request.limited``, ``bounds.window``).
        """
        _require(store)
        a = await _tasks(store, clock, 4, A)
        b = await _tasks(store, clock, 5, B)
        limits = {A: QueueLimits(max_running=2), B: QueueLimits(rate=(3, 60))}
        assert a[:1] == _ids(await store.claim_next("w1", LEASE_S, queues=[A],
                                                    limits={A: limits[A]}))
        ended = await store.claim_next("w1", LEASE_S, queues=[B], limit=2,
                                       limits={B: limits[B]})
        assert b[:2] == _ids(ended)
        for claim in ended:
            await store.transition(claim.snapshot.id, claim.snapshot.revision,
                                   Completed(event_id="done"), claim.lease)
        got = await store.claim_next("w2", LEASE_S, queues=[B, A], limit=20, limits=limits)
        assert sorted([a[1], b[2]]) == _ids(got)
