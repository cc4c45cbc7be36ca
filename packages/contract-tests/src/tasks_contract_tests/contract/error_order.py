"""Which refusal wins when several apply: the error order of each operation
(docs/contract.md, "Error order"). Every store decides in the same order, so a caller
who fixes the reported problem and retries meets the next one, never a different first
answer from another backend. Each refusal here also changes nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from tasks_core import (
    AuthorizationError,
    Completed,
    EventIdReused,
    InputRequested,
    InvalidInput,
    LeaseLost,
    Owner,
    RevisionConflict,
    TaskExists,
    TaskNotFound,
    TaskStore,
    Unavailable,
)
from tasks_core.events import Cancelled, WatcherAdded
from tasks_core.models import replaced

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    ALICE,
    MALLORY,
    SYSTEM,
    access,
    claim,
    created_and_claimed,
    new_task,
)

MakeStore = Callable[..., Awaitable[TaskStore]]


class ErrorOrderContract(ContractBase):
    """The refusal each operation reports first when several apply."""

    @pytest.mark.parametrize("limit", ["max_tasks", "max_active_tasks_per_scope"])
    async def test_create_names_a_taken_id_before_a_full_store(
        self, make_store: MakeStore, limit: str
    ) -> None:
        """At a limit of 1 with its one task stored, ``create`` of that task's id MUST
        raise ``TaskExists`` (not ``CapacityExceeded``); a ``replace`` of the live task
        at another revision MUST raise ``RevisionConflict`` before ``Unavailable``, which
        it raises at the task's own revision.

        Troubleshooting: decide the id first (``TaskExists``, then ``rules.check_replace``)
        and count the limits last, as ``MemoryStore.create`` does.
        """
        store = await make_store(**{limit: 1})
        first = await store.create(new_task())
        with pytest.raises(TaskExists):
            await store.create(new_task(first.id))
        with pytest.raises(RevisionConflict):
            await store.create(new_task(first.id), replace=replaced(first, revision=5))
        with pytest.raises(Unavailable):
            await store.create(new_task(first.id), replace=first)
        assert first == await store.get(first.id, tenant=None)

    async def test_transition_refuses_in_the_order_of_its_steps(
        self, store: TaskStore
    ) -> None:
        """``transition`` MUST decide find, authorize, replay, revision, apply, in this
        order: an unknown task with a lease is ``TaskNotFound``; a lease sending a request
        event is ``AuthorizationError`` even when stale; request access from another
        tenant sending a worker event is ``TaskNotFound`` (at a stale revision too), from a
        member
        ``AuthorizationError``; an applied event id sent again at a stale revision is
        ``duplicate`` (other content under it: ``EventIdReused``); an event the task
        cannot take at a stale revision is ``RevisionConflict`` (at its revision:
        ``InvalidInput``).

        Troubleshooting: call ``rules.decide_transition`` (or ``storekit.plan_transitions``)
        on the locked task; checking the revision first, say in the ``UPDATE … WHERE
        revision = :expected``, answers a retried call with a conflict instead of its
        outcome.
        """
        task, lease = await created_and_claimed(store)
        stale = lease.model_copy(update={"token": "not-the-token"})
        with pytest.raises(TaskNotFound):
            await store.transition("never-created", 0, Completed(event_id="c"), lease)
        with pytest.raises(AuthorizationError):
            await store.transition(task.id, task.revision, Cancelled(event_id="c"), stale)
        done = Completed(event_id="done")
        with pytest.raises(TaskNotFound):  # at any revision: no oracle for an outsider
            await store.transition(task.id, task.revision + 5, done, access(MALLORY))
        with pytest.raises(AuthorizationError):
            await store.transition(task.id, task.revision, done, access(ALICE))
        asked = await store.transition(task.id, task.revision,
                                       InputRequested(event_id="ask", key="k"), lease)
        again = await store.transition(task.id, task.revision,
                                       InputRequested(event_id="ask", key="k"), lease)
        assert ("applied", "duplicate") == (asked.outcome, again.outcome)
        with pytest.raises(EventIdReused):
            await store.transition(task.id, task.revision,
                                   InputRequested(event_id="ask", key="other"), lease)
        foreign = WatcherAdded(event_id="watch", principal=Owner("eve", tenant="evil"))
        with pytest.raises(RevisionConflict):
            await store.transition(task.id, task.revision, foreign, access(SYSTEM))
        with pytest.raises(InvalidInput):
            await store.transition(task.id, asked.snapshot.revision, foreign, access(SYSTEM))
        assert asked.snapshot == await store.get(task.id, tenant=None)

    async def test_claim_checks_its_arguments_first_and_unavailable_before_deferred(
        self, store: TaskStore
    ) -> None:
        """``claim`` MUST refuse a bad ``lease_for`` with ``InvalidInput`` before it looks
        for the task (even an unknown id); a delayed task that was cancelled is
        ``Unavailable``, not ``Deferred``.

        Troubleshooting: ``storekit.check_claim`` before the read, then
        ``rules.check_claimable`` (finished, waiting and leased before "not yet").
        """
        with pytest.raises(InvalidInput):
            await store.claim("never-created", "w1", -1)
        delayed = await store.create(new_task(delay_s=3600))
        await store.transition(delayed.id, 0, Cancelled(event_id="stop"), access(ALICE))
        with pytest.raises(Unavailable):
            await claim(store, delayed.id)

    async def test_a_stale_lease_is_refused_before_a_bad_argument(
        self, store: TaskStore
    ) -> None:
        """``renew`` with a bad ``lease_for`` and ``report_progress`` with a value past
        100 MUST raise ``LeaseLost`` under a stale lease and ``InvalidInput`` under the
        live one.

        Troubleshooting: check the lease (``rules.check_lease``) on the locked task first,
        then call ``rules.renew``/``rules.report_progress``: they check their argument
        before the lease, so a store that leaves the lease to them answers ``InvalidInput``.
        """
        task, lease = await created_and_claimed(store)
        stale = lease.model_copy(update={"token": "not-the-token"})
        with pytest.raises(LeaseLost):
            await store.renew(stale, -1)
        with pytest.raises(LeaseLost):
            await store.report_progress(stale, 101.0, None)
        with pytest.raises(InvalidInput):
            await store.renew(lease, -1)
        with pytest.raises(InvalidInput):
            await store.report_progress(lease, 101.0, None)
        assert task == await store.worker_snapshot(lease)
