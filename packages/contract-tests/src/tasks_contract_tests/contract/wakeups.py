"""``wait_for_work`` (capability ``wakeups``) wakes for every kind of new work: besides a
create and a release (``CapabilityContract``), an answer that makes a waiting task
runnable and a retry scheduled by its run."""

from __future__ import annotations

import pytest
from tasks_core import (
    Claim,
    InputRequested,
    InputResponsesAccepted,
    RetryPolicy,
    RetryRequested,
    TaskStatus,
    TaskStore,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import ALICE, LEASE_S, access, new_task
from tasks_contract_tests.contract.capabilities import POKES, _woken_by


async def _claimed(
    store: TaskStore, count: int, retry: RetryPolicy | None = None
) -> list[Claim]:
    """``count`` tasks on queue ``mail``, each claimed."""
    claims = []
    for _ in range(count):
        created = await store.create(new_task(queue="mail", retry=retry))
        claims.append(await store.claim(created.id, "w1", LEASE_S))
    return claims


class WakeupContract(ContractBase):
    """``wait_for_work`` wakes for answers and scheduled retries too."""

    @pytest.mark.parametrize("cause", ["answered", "retry_scheduled"])
    async def test_wait_for_work_wakes_when_an_answer_or_a_retry_makes_work(
        self, store: TaskStore, cause: str
    ) -> None:
        """``wait_for_work([q], timeout)`` MUST return ``True`` before the timeout when an
        answer makes a waiting task of ``q`` runnable again, and when the run of a task of
        ``q`` schedules a retry (the waiter learns when it falls due).

        Troubleshooting: notify in (or right after) every commit that leaves a task
        ``pending`` — a transition as much as ``create`` and ``release``; a store that
        notifies from ``create`` alone leaves an answered task waiting for the next poll.
        """
        if not store.capabilities.wakeups:
            pytest.skip("store capability 'wakeups' is off")
        if cause == "answered":
            claims = await _claimed(store, POKES)
            for held in claims:
                asked = await store.transition(
                    held.snapshot.id, 0, InputRequested(event_id="ask", key="ok"), held.lease)
                assert TaskStatus.WAITING_INPUT == asked.snapshot.status
                await store.release(held.lease)
        else:
            claims = await _claimed(store, POKES, retry=RetryPolicy.fixed(60, attempts=3))
        pending = iter(claims)

        async def make_work() -> object:
            held = next(pending)
            if cause == "answered":
                answer = InputResponsesAccepted(event_id="yes", responses={"ok": True})
                done = await store.transition(held.snapshot.id, 1, answer, access(ALICE))
            else:
                retry = RetryRequested(event_id="again", error="Flaky")
                done = await store.transition(held.snapshot.id, 0, retry, held.lease)
            assert (done.outcome, done.snapshot.status) == ("applied", TaskStatus.PENDING)
            return done

        assert [True] == await _woken_by(store, "mail", make_work)
