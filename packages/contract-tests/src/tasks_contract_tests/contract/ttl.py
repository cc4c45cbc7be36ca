"""TTL, retention, hiding before reap, reap cascading."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tasks_core import (
    Cancelled,
    Completed,
    InvalidInput,
    ManualClock,
    TaskExists,
    TaskNotFound,
    TaskQuery,
    TaskStore,
    Unavailable,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    ALICE,
    LEASE_S,
    SYSTEM,
    access,
    claim,
    created_and_claimed,
    finished_task,
    new_task,
)


class TTLContract(ContractBase):
    """TTL, retention, hiding before reap, reap cascading."""

    async def test_expired_task_is_hidden_before_reap(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """From ``expires_at`` on (not a millisecond later), a task MUST read as missing to
        ``get``, ``history``, ``list`` and request transitions — for System too — even
        though ``reap`` has not run.

        Troubleshooting: compare ``expires_at <= now`` (store clock) in every read path
        and in the request-transition lookup; do not rely on the reaper having run.
        """
        created = await store.create(new_task(ttl_s=10))
        clock.advance(9.999)
        assert created == await store.get(created.id, tenant="default")
        clock.advance(0.001)
        for tenant in ("default", None):
            with pytest.raises(TaskNotFound):
                await store.get(created.id, tenant=tenant)
            with pytest.raises(TaskNotFound):
                await store.history(created.id, tenant=tenant)
            assert [] == await store.list(TaskQuery(tenant=tenant))
        for principal in (ALICE, SYSTEM):
            with pytest.raises(TaskNotFound):
                await store.transition(created.id, 0, Cancelled(event_id="c"), access(principal))

    async def test_expired_task_is_not_claimable(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """An expired task MUST NOT be claimed: ``claim`` raises ``Unavailable`` and
        ``claim_next`` skips it.

        Troubleshooting: add ``expires_at`` to the claimable condition of both claim paths.
        """
        created = await store.create(new_task(ttl_s=10))
        clock.advance(10)
        with pytest.raises(Unavailable):
            await claim(store, created.id)
        assert [] == await store.claim_next("w1", 30, queues=["default"])

    async def test_a_lease_ignores_ttl(self, store: TaskStore, clock: ManualClock) -> None:
        """The holder of a live lease MUST still reach its task after the task's TTL
        passed: ``worker_snapshot`` and its completion work.

        Troubleshooting: worker operations find the task by id and check the lease only;
        the TTL hides a task from requests, not from the run that holds it.
        """
        snapshot, lease = await created_and_claimed(store, ttl_s=10)
        clock.advance(10)
        with pytest.raises(TaskNotFound):
            await store.get(snapshot.id, tenant="default")
        assert snapshot.id == (await store.worker_snapshot(lease)).id
        done = await store.transition(snapshot.id, 0, Completed(event_id="d"), lease)
        assert "applied" == done.outcome

    async def test_a_run_past_its_ttl_keeps_its_task_until_its_lease_ends(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A task whose TTL passed while a run holds a live lease on it MUST stay where it
        is until that lease ends or expires: ``reap`` leaves it, and ``create(replace=…)``
        of it raises ``Unavailable`` — a new run of its id would run beside the old one.
        Once the lease has expired (the holder is gone), both take it.

        Troubleshooting: reap only ``rules.gone`` tasks (expired, no live lease) and decide
        a replacement with ``rules.check_replace`` on the row read in the write's step;
        the TTL still hides the task from requests.
        """
        snapshot, _ = await created_and_claimed(store, ttl_s=10)
        clock.advance(10)
        with pytest.raises(TaskNotFound):
            await store.get(snapshot.id, tenant="default")
        assert [] == await store.reap(10)
        with pytest.raises(TaskExists) as caught:
            await store.create(new_task(snapshot.id))
        with pytest.raises(Unavailable):
            await store.create(new_task(snapshot.id), replace=caught.value.current)
        clock.advance(LEASE_S)
        assert [snapshot.id] == await store.reap(10)

    async def test_a_replacement_waits_for_the_lease_not_for_the_reaper(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """Once the live lease on a task past its TTL has ended (its run finished), the
        task MUST be replaceable at once, before any reap.

        Troubleshooting: ``rules.check_replace`` refuses only a lease that is live at the
        store clock; an ended one (``claim.ended``) frees the id.
        """
        snapshot, lease = await created_and_claimed(store, ttl_s=10)
        clock.advance(10)
        done = await store.transition(snapshot.id, 0, Completed(event_id="d"), lease)
        with pytest.raises(TaskExists) as caught:
            await store.create(new_task(snapshot.id))
        assert done.snapshot.revision == caught.value.current.revision
        fresh = await store.create(new_task(snapshot.id), replace=caught.value.current)
        assert fresh == await store.get(snapshot.id, tenant="default")

    async def test_reap_returns_exactly_the_expired_ids(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``reap`` MUST delete and return exactly the tasks whose ``expires_at`` has
        passed (by TTL or by retention), and leave every other task readable.

        Troubleshooting: select on ``expires_at <= now`` with the store clock; tasks
        without ``expires_at`` never expire.
        """
        expiring = [
            await store.create(new_task(ttl_s=10)),
            await store.create(new_task(ttl_s=5)),
            await finished_task(store, retention_s=9),
        ]
        staying = [
            await store.create(new_task(ttl_s=10.001)),
            await store.create(new_task()),
            await finished_task(store),
            await finished_task(store, retention_s=20),
        ]
        clock.advance(10)
        assert sorted(s.id for s in expiring) == sorted(await store.reap(100))
        for snapshot in expiring:
            with pytest.raises(TaskNotFound):
                await store.get(snapshot.id, tenant=None)
        for snapshot in staying:
            assert snapshot.id == (await store.get(snapshot.id, tenant=None)).id

    async def test_reap_respects_limit(self, store: TaskStore, clock: ManualClock) -> None:
        """``reap(limit)`` MUST delete at most ``limit`` tasks per call, so repeated calls
        visit every expired task exactly once; ``limit < 1`` raises ``InvalidInput``.

        Troubleshooting: apply the limit in the selecting query (``LIMIT``) and delete
        exactly the selected ids.
        """
        ids = {(await store.create(new_task(ttl_s=1))).id for _ in range(5)}
        clock.advance(1)
        batches = [await store.reap(2) for _ in range(4)]
        assert [2, 2, 1, 0] == [len(batch) for batch in batches]
        assert ids == {task_id for batch in batches for task_id in batch}
        with pytest.raises(InvalidInput):
            await store.reap(0)

    async def test_a_reaped_task_leaves_its_queue(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A pending task reaped at its TTL MUST be gone from its queue: ``claim_next``
        serves the tasks created after it, and nothing else.

        Troubleshooting: delete the row itself; an index of claimable tasks kept beside
        the rows must lose the task in the same step.
        """
        gone = await store.create(new_task(ttl_s=10))
        clock.advance(10)
        assert [gone.id] == await store.reap(10)
        fresh = await store.create(new_task())
        got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=5)
        assert [fresh.id] == [c.snapshot.id for c in got]

    async def test_reap_deletes_history_too_so_the_id_is_free(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``reap`` MUST delete a task with its history and event ids: creating the same id
        afterwards succeeds with revision 0, an empty history, and the old event ids apply
        anew.

        Troubleshooting: cascade the delete to the history/inbox tables (one transaction)
        or the new task inherits the old run's events.
        """
        done = await finished_task(store, end="cancelled", ttl_s=30)
        clock.advance(30)
        assert [done.id] == await store.reap(10)
        fresh = await store.create(new_task(done.id))
        assert 0 == fresh.revision
        assert [] == await store.history(done.id, tenant="default")
        again = await store.transition(done.id, 0, Cancelled(event_id="finish"), access(ALICE))
        assert "applied" == again.outcome

    async def test_retention_counts_from_finished_at(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``retention`` MUST count from ``finished_at``: a live task without TTL never
        expires, and a finished one expires exactly ``retention`` after it finished.

        Troubleshooting: recompute ``expires_at`` in the terminal write
        (``min(created_at + ttl, finished_at + retention)``).
        """
        created = await store.create(new_task(retention_s=10))
        assert created.expires_at is None
        clock.advance(1000)
        await store.get(created.id, tenant="default")
        done = await store.transition(created.id, 0, Cancelled(event_id="c"), access(ALICE))
        assert done.snapshot.finished_at is not None
        assert done.snapshot.finished_at + timedelta(seconds=10) == done.snapshot.expires_at
        clock.advance(9.999)
        await store.get(created.id, tenant="default")
        clock.advance(0.001)
        with pytest.raises(TaskNotFound):
            await store.get(created.id, tenant="default")

    @pytest.mark.parametrize(
        ("ttl", "retention", "expected"), [(50, 100, 50), (50, 10, 30)], ids=["ttl", "retention"]
    )
    async def test_expires_at_is_the_earlier_of_ttl_and_retention(
        self, store: TaskStore, clock: ManualClock, ttl: float, retention: float, expected: float
    ) -> None:
        """``expires_at`` MUST be ``min(created_at + ttl, finished_at + retention)``.

        Troubleshooting: a long retention never extends a TTL, and a short retention cuts
        a long TTL short.
        """
        created = await store.create(new_task(ttl_s=ttl, retention_s=retention))
        assert created.created_at + timedelta(seconds=ttl) == created.expires_at
        clock.advance(20)
        done = await store.transition(created.id, 0, Cancelled(event_id="c"), access(ALICE))
        assert created.created_at + timedelta(seconds=expected) == done.snapshot.expires_at

    async def test_reap_of_nothing_returns_an_empty_list(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``reap`` with nothing expired MUST return ``[]`` and delete nothing.

        Troubleshooting: a sweep that finds nothing is normal; it must not fail nor touch
        live tasks.
        """
        assert [] == await store.reap(10)
        kept = [await store.create(new_task(ttl_s=60)), await finished_task(store)]
        clock.advance(59)
        assert [] == await store.reap(10)
        listed = await store.list(TaskQuery(tenant=None))
        assert sorted(s.id for s in kept) == [s.id for s in listed]
