"""Priorities: ``claim_next`` serves the highest ``priority`` first, then the earliest
available instant, then the id (``storekit.claim_order``) — across queues, with delayed
tasks and due retries, and one at a time in an exclusive queue."""

from __future__ import annotations

import pytest
from tasks_core import Claim, Completed, ManualClock, TaskStore

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import LEASE_S, new_task


def _ids(claims: list[Claim]) -> list[str]:
    return [claim.snapshot.id for claim in claims]


class PriorityContract(ContractBase):
    """``NewTask.priority`` and the claim order it leads."""

    async def test_priority_is_stored_and_read_back(self, store: TaskStore) -> None:
        """A task's ``priority`` MUST be stored as given (0 when not given) and read back
        by ``get``, ``list`` and the claim.

        Troubleshooting: keep ``priority`` in the stored snapshot (and in whatever the
        candidate query orders by).
        """
        high = await store.create(new_task("zz-high", priority=100))
        low = await store.create(new_task("zz-low", priority=-100))
        plain = await store.create(new_task("zz-plain"))
        assert (100, -100, 0) == (high.priority, low.priority, plain.priority)
        stored = [(await store.get(t.id, tenant=None)).priority for t in (high, low, plain)]
        assert [100, -100, 0] == stored
        claims = await store.claim_next("w1", LEASE_S, queues=["default"], limit=3)
        assert [100, 0, -100] == [c.snapshot.priority for c in claims]

    async def test_claim_next_serves_the_highest_priority_then_available_instant_then_id(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim_next`` MUST serve by priority (highest first), then by available
        instant, then by id — whatever the creation order, across the call's queues, a
        due delayed task among them.

        Troubleshooting: order candidates by ``storekit.claim_order``:
        ``(-priority, available instant, id)``; an index on ``(queue, available_at)``
        alone serves the wrong order.
        """
        old_low = await store.create(new_task("zz-a-low", priority=-1))
        clock.advance(1)
        plain = await store.create(new_task("zz-b-plain", queue="mail"))
        clock.advance(1)
        high = await store.create(new_task("zz-c-high", priority=7))
        clock.advance(1)
        high_tie = await store.create(new_task("zz-b-high", priority=7, queue="mail"))
        delayed_high = await store.create(new_task("zz-d-high", priority=7, delay_s=5))
        middle = await store.create(new_task("zz-e-middle", priority=3))
        clock.advance(10)
        got = await store.claim_next("w1", LEASE_S, queues=["default", "mail"], limit=10)
        expected = [high.id, high_tie.id, delayed_high.id, middle.id, plain.id,
                    old_low.id]
        assert expected == _ids(got)

    async def test_claim_next_with_a_limit_takes_the_highest_priorities(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim_next(limit=n)`` MUST take the ``n`` first in priority order, leaving
        the lower ones (even older ones) pending.

        Troubleshooting: apply the limit after ordering by priority, in every branch of
        the candidate query.
        """
        old = [(await store.create(new_task(priority=0))).id for _ in range(3)]
        clock.advance(5)
        urgent = [(await store.create(new_task(priority=50))).id for _ in range(2)]
        got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=3)
        assert [*urgent, old[0]] == _ids(got)

    @pytest.mark.parametrize("exclusive", [True, False])
    async def test_a_queue_is_fifo_within_one_priority(
        self, store: TaskStore, clock: ManualClock, exclusive: bool
    ) -> None:
        """Within one priority a queue MUST stay first in, first out — an exclusive queue
        too, one task at a time; a higher priority created later goes first.

        Troubleshooting: an exclusive queue serves its head in ``claim_order``, not its
        oldest task.
        """
        if exclusive and not store.capabilities.exclusive_queues:
            pytest.skip("the store has no exclusive queues")
        first = await store.create(new_task("zz-1", queue="serial"))
        clock.advance(1)
        second = await store.create(new_task("zz-0", queue="serial"))
        clock.advance(1)
        urgent = await store.create(new_task("zz-2", queue="serial", priority=1))
        served = []
        for _ in range(3):
            got = await store.claim_next("w1", LEASE_S, queues=["serial"],
                                         exclusive=["serial"] if exclusive else ())
            assert 1 == len(got)
            served.append(got[0].snapshot.id)
            done = await store.transition(got[0].snapshot.id, got[0].snapshot.revision,
                                          Completed(event_id="done"), got[0].lease)
            assert "applied" == done.outcome
        assert [urgent.id, first.id, second.id] == served
