"""counts(): how many tasks of a tenant read each status in each queue (capability
``counts``) — the tasks ``list`` returns for that tenant, queue and status, counted.

Skipped when the capability is off (``CapabilityContract`` then proves that the call
raises ``CapabilityNotSupported``).
"""

from __future__ import annotations

import pytest
from tasks_core import (
    InputRequested,
    InvalidInput,
    ManualClock,
    Owner,
    TaskQuery,
    TaskStatus,
    TaskStore,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    ALICE,
    LEASE_S,
    MALLORY,
    created_and_claimed,
    finished_task,
    new_task,
)

Counts = dict[tuple[str, TaskStatus], int]
P, SC, RU, CL, W = (TaskStatus.PENDING, TaskStatus.SCHEDULED, TaskStatus.RUNNING,
                    TaskStatus.CLAIMED, TaskStatus.WAITING_INPUT)
CO, FA, CA = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED


def _require(store: TaskStore) -> None:
    if not store.capabilities.counts:
        pytest.skip("store capability 'counts' is off")


async def _listed(store: TaskStore, tenant: str | None) -> Counts:
    """The same counts read from ``list``: every queue, every status, page by page."""
    found: Counts = {}
    for status in TaskStatus:
        after: str | None = None
        while True:
            page = await store.list(TaskQuery(tenant=tenant, statuses=frozenset({status}),
                                              after=after, limit=1000))
            for snapshot in page:
                key = (snapshot.queue, status)
                found[key] = found.get(key, 0) + 1
            if len(page) < 1000:
                break
            after = page[-1].id
    return found


async def _every_status(store: TaskStore, clock: ManualClock) -> None:
    """Tasks of every status over two queues: an expired one, a lapsed lease, a task
    cancelled under a live lease (it reads cancelled)."""
    await store.create(new_task(ttl_s=1))
    await created_and_claimed(store, queue="mail")
    clock.advance(LEASE_S + 1)  # the ttl passed (gone), the lease lapsed (pending again)
    for queue in ("default", "default", "mail"):
        await store.create(new_task(queue=queue))
    await store.create(new_task(delay_s=3600, queue="mail"))
    await created_and_claimed(store)
    await store.create(new_task(queue="held"))
    await store.claim_next("w2", LEASE_S, queues=["held"], limit=1, start=0)
    waiting, lease = await created_and_claimed(store, queue="mail")
    await store.transition(waiting.id, 0, InputRequested(event_id="q", key="k"), lease)
    for end in ("completed", "completed", "failed", "cancelled"):
        await finished_task(store, end)


class CountContract(ContractBase):
    """counts(): by queue and status, per tenant, as ``list`` reads them."""

    async def test_counts_read_every_status_as_list_does(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``counts`` MUST count each task once under its queue and the status ``get``
        reads (``running``, ``claimed`` and ``scheduled`` derived; a lapsed lease
        ``pending``; a task cancelled under a live lease ``cancelled``), leave expired
        tasks out, and agree with ``list`` filtered by each status.

        Troubleshooting: count from the stored status and derive what ``rules.present``
        derives — a live lease (not ended, not expired; ``claim.held`` says claimed), a
        ``run_at`` ahead — at the store's ``now``; leave out ``expires_at <= now``.
        """
        _require(store)
        await _every_status(store, clock)
        expected: Counts = {
            ("default", P): 2, ("default", RU): 1, ("default", CO): 2, ("default", FA): 1,
            ("default", CA): 1, ("mail", P): 2, ("mail", SC): 1, ("mail", W): 1,
            ("held", CL): 1,
        }
        assert expected == await store.counts(tenant="default")
        assert expected == await _listed(store, "default")

    async def test_counts_follow_the_store_clock(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A delayed task MUST count ``scheduled`` until its ``run_at`` and ``pending``
        from then on; a running task ``pending`` once its lease lapsed; a task MUST leave
        the counts when its ttl ends.

        Troubleshooting: compare with the store clock read in the same step, not with a
        clock read when the counts were cached.
        """
        _require(store)
        await store.create(new_task(delay_s=10))
        await created_and_claimed(store, ttl_s=LEASE_S + 20)
        assert {("default", SC): 1, ("default", RU): 1} == await store.counts(tenant=None)
        clock.advance(10)
        assert {("default", P): 1, ("default", RU): 1} == await store.counts(tenant=None)
        clock.advance(LEASE_S)
        assert {("default", P): 2} == await store.counts(tenant=None)
        clock.advance(20)
        assert {("default", P): 1} == await store.counts(tenant=None)

    async def test_counts_are_per_tenant(self, store: TaskStore) -> None:
        """``counts(tenant=t)`` MUST count only tenant ``t``'s tasks (another tenant's
        read exactly like missing ones), ``tenant=None`` every tenant's; a tenant without
        tasks has no counts.

        Troubleshooting: filter on the tenant column in the same step as the count;
        ``None`` means "no tenant filter".
        """
        _require(store)
        await store.create(new_task(owner=ALICE))
        await store.create(new_task(owner=MALLORY, queue="mail"))
        await store.create(new_task(owner=MALLORY, queue="mail"))
        await store.create(new_task(owner=Owner("eve", tenant="acme")))
        assert {("default", P): 1} == await store.counts(tenant="default")
        assert {("mail", P): 2} == await store.counts(tenant="evil")
        assert {("default", P): 2, ("mail", P): 2} == await store.counts(tenant=None)
        assert {} == await store.counts(tenant="nobody")
        assert await _listed(store, None) == await store.counts(tenant=None)

    @pytest.mark.parametrize("tenant", [5, b"default", ["default"]])
    async def test_counts_refuse_a_tenant_that_is_not_a_string(
        self, store: TaskStore, tenant: object
    ) -> None:
        """``counts`` MUST refuse a ``tenant`` that is neither a string nor ``None`` with
        ``InvalidInput``.

        Troubleshooting: check the argument before the read.
        """
        _require(store)
        with pytest.raises(InvalidInput):
            await store.counts(tenant=tenant)  # type: ignore[arg-type]
