"""max_tasks and max_active_tasks_per_scope."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import pytest
from tasks_core import (
    CapacityExceeded,
    InputRequested,
    ManualClock,
    RetryPolicy,
    RetryRequested,
    Snapshot,
    TaskNotFound,
    TaskQuery,
    TaskStatus,
    TaskStore,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import MALLORY, created_and_claimed, finished_task, new_task

MakeStore = Callable[..., Awaitable[TaskStore]]

OLD_SCOPE_DEFAULT = 10_000
"""The per-tenant default ``max_active_tasks_per_scope`` had before limits were off."""


def backlog_size() -> int:
    """The backlog of the default-limits test: 100,000 tasks, or
    ``TASKS_CONTRACT_BACKLOG`` where a store's test server is too slow for that (the
    MongoDB test server writes a few hundred documents a second) — never fewer than one
    past the old per-tenant default.

    Raises:
        ValueError: ``TASKS_CONTRACT_BACKLOG`` is not a whole number past the old default.
    """
    size = int(os.environ.get("TASKS_CONTRACT_BACKLOG", "100000"))
    if size <= OLD_SCOPE_DEFAULT:
        raise ValueError(f"TASKS_CONTRACT_BACKLOG must be above {OLD_SCOPE_DEFAULT}")
    return size


class CapacityContract(ContractBase):
    """max_tasks and max_active_tasks_per_scope."""

    async def test_max_tasks_refuses_with_capacity_exceeded_and_stores_nothing(
        self, make_store: MakeStore
    ) -> None:
        """Past ``max_tasks``, ``create`` MUST raise ``CapacityExceeded`` with
        ``limit == "max_tasks"`` and ``retryable`` true, storing nothing; ``max_tasks``
        counts every stored task, terminal ones included, in every tenant.

        Troubleshooting: count the stored tasks inside the creating transaction (or keep a
        counter row updated in it); counting before it opens lets concurrent creators
        overshoot.
        """
        store = await make_store(max_tasks=3)
        await finished_task(store)
        await store.create(new_task())
        await store.create(new_task(owner=MALLORY))
        refused = new_task()
        with pytest.raises(CapacityExceeded) as caught:
            await store.create(refused)
        assert ("max_tasks", True) == (caught.value.limit, caught.value.retryable)
        with pytest.raises(TaskNotFound):
            await store.get(refused.id, tenant=None)
        assert 3 == len(await store.list(TaskQuery(tenant=None)))

    async def test_default_limits_accept_a_backlog_past_the_old_caps(
        self, make_store: MakeStore
    ) -> None:
        """With its default options a store MUST refuse no ordinary work: both limits are
        off unless set, so one owner's backlog of 100,000 live tasks (ten times the old
        per-tenant default of 10,000: a nightly batch; :func:`backlog_size`) is taken,
        beside finished tasks kept for their retention, and the next create still
        succeeds. The backlog goes in by ``create_many`` of 1,000 where the store has
        ``batch_create``, else by creates 100 at a time.

        Troubleshooting: read ``StoreLimits.max_tasks`` and ``max_active_tasks_per_scope``
        as ``None`` (off) by default; compare with ``StoreLimits.tasks_cap`` and
        ``scope_cap`` (no limit when off), never with a number of your own.
        """
        store = await make_store()
        await finished_task(store)
        await finished_task(store, end="failed")
        backlog = [new_task() for _ in range(backlog_size())]
        if store.capabilities.batch_create:
            for start in range(0, len(backlog), 1000):
                await store.create_many(backlog[start:start + 1000])
        else:
            for start in range(0, len(backlog), 100):
                await asyncio.gather(*(store.create(task) for task in backlog[start:start + 100]))
        last = await store.create(new_task())
        assert last == await store.get(last.id, tenant=last.tenant)
        assert backlog[-1].id == (await store.get(backlog[-1].id, tenant=last.tenant)).id

    async def test_active_limit_counts_per_tenant(self, make_store: MakeStore) -> None:
        """``max_active_tasks_per_scope`` MUST count the live tasks of the creating task's
        tenant only: a full tenant is refused with ``limit ==
        "max_active_tasks_per_scope"`` while another tenant still creates.

        Troubleshooting: filter the count by tenant; a global count starves every tenant
        because of one.
        """
        store = await make_store(max_active_tasks_per_scope=2)
        await store.create(new_task())
        await store.create(new_task())
        with pytest.raises(CapacityExceeded) as caught:
            await store.create(new_task())
        assert ("max_active_tasks_per_scope", True) == (
            caught.value.limit,
            caught.value.retryable,
        )
        other = await store.create(new_task(owner=MALLORY))
        assert other == await store.get(other.id, tenant="evil")

    async def test_waiting_and_running_tasks_count_as_active(
        self, make_store: MakeStore, clock: ManualClock
    ) -> None:
        """Every task that is not terminal (nor expired) MUST count against
        ``max_active_tasks_per_scope``: one waiting for input, one running under a live
        lease and one waiting for its retry fill a limit of 3, and the next create is
        refused.

        Troubleshooting: count "not terminal and not expired" (``rules.counts_as_active``),
        not the statuses a worker may claim: a count of ``pending`` alone lets a tenant
        park any number of tasks in ``waiting_input``.
        """
        store = await make_store(max_active_tasks_per_scope=3)
        waiting, lease = await created_and_claimed(store)
        asked = await store.transition(
            waiting.id, 0, InputRequested(event_id="ask", key="ok"), lease)
        assert TaskStatus.WAITING_INPUT == asked.snapshot.status
        await store.release(lease)
        await created_and_claimed(store)
        retrying, retry_lease = await created_and_claimed(
            store, retry=RetryPolicy.fixed(60, attempts=3))
        retried = await store.transition(
            retrying.id, 0, RetryRequested(event_id="again", error="E"), retry_lease)
        assert (TaskStatus.PENDING, 1) == (retried.snapshot.status, retried.snapshot.retry_count)
        clock.advance(1)
        with pytest.raises(CapacityExceeded) as caught:
            await store.create(new_task())
        assert "max_active_tasks_per_scope" == caught.value.limit

    async def test_finished_and_expired_tasks_free_an_active_slot(
        self, make_store: MakeStore, clock: ManualClock
    ) -> None:
        """Terminal tasks and expired tasks MUST NOT count against
        ``max_active_tasks_per_scope``.

        Troubleshooting: count only non-terminal tasks whose ``expires_at`` is unset or
        still ahead of the store clock (``rules.counts_as_active``).
        """
        store = await make_store(max_active_tasks_per_scope=2)
        await finished_task(store)
        await store.create(new_task(ttl_s=5))
        await store.create(new_task())
        with pytest.raises(CapacityExceeded):
            await store.create(new_task())
        clock.advance(5)
        await store.create(new_task())
        with pytest.raises(CapacityExceeded):
            await store.create(new_task())

    async def test_replacing_a_finished_task_needs_no_free_slot(
        self, make_store: MakeStore
    ) -> None:
        """Replacing a finished task with a new run MUST succeed at ``max_tasks`` (the id is
        reused, the task count does not grow).

        Troubleshooting: a replace swaps a row; do not count it as an additional task.
        """
        store = await make_store(max_tasks=1)
        done = await finished_task(store)
        fresh = await store.create(new_task(done.id), replace=done)
        assert [fresh] == await store.list(TaskQuery(tenant=None))

    async def test_replacing_an_expired_task_counts_the_tenants_other_live_tasks(
        self, make_store: MakeStore, clock: ManualClock
    ) -> None:
        """Replacing an expired (not finished) task MUST count the tenant's other live
        tasks against ``max_active_tasks_per_scope``, never the replaced one: with a limit
        of 2 and one other live task the first replace is taken (2 live), the next one is
        refused with ``CapacityExceeded`` and keeps the expired task as it was.

        Troubleshooting: leave out the replaced row itself, not the rows after it; and an
        expired row is not live (``rules.counts_as_active``).
        """
        store = await make_store(max_active_tasks_per_scope=2)
        first = await store.create(new_task(ttl_s=10))
        second = await store.create(new_task(ttl_s=10))
        clock.advance(10)
        await store.create(new_task())
        fresh = await store.create(new_task(first.id), replace=first)
        assert (0, first.id) == (fresh.revision, fresh.id)
        assert fresh.run_id != first.run_id
        with pytest.raises(CapacityExceeded) as caught:
            await store.create(new_task(second.id), replace=second)
        assert "max_active_tasks_per_scope" == caught.value.limit
        with pytest.raises(TaskNotFound):  # still the expired run, hidden as before
            await store.get(second.id, tenant=None)

    @pytest.mark.parametrize("limit", ["max_tasks", "max_active_tasks_per_scope"])
    async def test_capacity_holds_under_concurrent_creation(
        self, make_store: MakeStore, limit: str
    ) -> None:
        """20 concurrent creators against a limit of 5 MUST yield exactly 5 tasks and 15
        ``CapacityExceeded``, and a listing MUST show exactly those 5.

        Troubleshooting: the check and the insert are one atomic step (a serializable
        transaction, a lock on a per-tenant counter row, or a conditional insert); a count
        read outside it admits every concurrent creator.
        """
        store = await make_store(**{limit: 5})
        attempts = [new_task() for _ in range(20)]
        results = await asyncio.gather(
            *(store.create(task) for task in attempts), return_exceptions=True
        )
        created = sorted(r.id for r in results if isinstance(r, Snapshot))
        refused = [r for r in results if isinstance(r, CapacityExceeded)]
        assert (5, 15) == (len(created), len(refused))
        assert {limit} == {r.limit for r in refused}
        assert created == [s.id for s in await store.list(TaskQuery(tenant=None))]
