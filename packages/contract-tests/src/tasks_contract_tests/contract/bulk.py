"""create_many(): a batch of new tasks in one atomic step, all or nothing (capability
``batch_create``), as ``storekit.check_create_many`` and ``check_batch_room`` decide.

Skipped when the capability is off (``CapabilityContract`` then proves that the call
raises ``CapabilityNotSupported``).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from tasks_core import (
    CapacityExceeded,
    InvalidInput,
    NewTask,
    Owner,
    Snapshot,
    TaskExists,
    TaskNotFound,
    TaskQuery,
    TaskStatus,
    TaskStore,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import ALICE, BOB, LEASE_S, MALLORY, finished_task, new_task
from tasks_contract_tests.contract.warm_races import RACERS, Call, N, Racer

MakeStore = Callable[..., Awaitable[TaskStore]]


def _require(store: TaskStore) -> None:
    if not store.capabilities.batch_create:
        pytest.skip("store capability 'batch_create' is off")


async def _stored(store: TaskStore) -> list[str]:
    return [s.id for s in await store.list(TaskQuery(tenant=None, limit=1000))]


async def _absent(store: TaskStore, news: list[NewTask]) -> None:
    for new in news:
        with pytest.raises(TaskNotFound):
            await store.get(new.id, tenant=None)


class _SteppingClock:
    """A clock one millisecond later at every read."""

    def __init__(self) -> None:
        self._now = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            self._now += timedelta(milliseconds=1)
            return self._now

class BulkContract(ContractBase):
    """create_many: in order, all or nothing, capacity for the batch as a whole."""

    async def test_bulk_stores_the_batch_in_order_at_one_instant(
        self, store: TaskStore
    ) -> None:
        """``create_many`` MUST store every task at revision 0 and return their snapshots
        in the order given, all created at one instant, each what ``get`` reads after;
        the tasks are claimable like any others. An empty batch stores nothing.

        Troubleshooting: read the clock once per batch (after the creators' lock) and make
        every snapshot with ``storekit.new_snapshots``; return them in the batch's order,
        not the database's.
        """
        _require(store)
        assert [] == await store.create_many([])
        news = [new_task(f"b{n}", owner=owner, queue=queue, priority=priority)
                for n, (owner, queue, priority) in enumerate([
                    (ALICE, "default", 0), (MALLORY, "mail", 5), (None, "default", -3),
                    (BOB, "mail", 0), (ALICE, "default", 100)])]
        news.reverse()  # ids out of order: the result keeps the batch's
        created = await store.create_many(news)
        assert [n.id for n in news] == [s.id for s in created]
        assert {0} == {s.revision for s in created}
        assert 1 == len({s.created_at for s in created})
        assert {TaskStatus.PENDING} == {s.status for s in created}
        for snapshot in created:
            assert snapshot == await store.get(snapshot.id, tenant=snapshot.tenant)
        claims = await store.claim_next("w1", LEASE_S, queues=["default", "mail"], limit=9)
        assert sorted(s.id for s in created) == sorted(c.snapshot.id for c in claims)

    async def test_bulk_refuses_a_taken_id_and_stores_nothing(
        self, store: TaskStore
    ) -> None:
        """An id that is taken — by a live task, or a finished one (``create_many`` never
        replaces) — MUST refuse the whole batch with ``TaskExists`` naming the first taken
        id of the batch, storing none of its tasks.

        Troubleshooting: read every id of the batch inside the atomic step, before any
        insert, and roll back on a refusal; an insert that skips a taken row (``ON
        CONFLICT DO NOTHING``) must still fail the batch.
        """
        _require(store)
        live = await store.create(new_task())
        done = await finished_task(store)
        fresh = [new_task(), new_task()]
        for batch, named in (([fresh[0], live_new(live), fresh[1]], live.id),
                             ([fresh[0], live_new(done), live_new(live)], done.id)):
            with pytest.raises(TaskExists) as caught:
                await store.create_many(batch)
            assert named == caught.value.current.id
            await _absent(store, fresh)
        assert sorted([live.id, done.id]) == await _stored(store)

    async def test_bulk_refuses_bad_batches(self, store: TaskStore) -> None:
        """``create_many`` MUST refuse with ``InvalidInput``, storing nothing, a batch that
        names an id twice, holds anything but ``NewTask``, or has more than 1000 tasks.

        Troubleshooting: call ``storekit.check_create_many(news)`` first.
        """
        _require(store)
        twice = new_task()
        bad: list[object] = [[new_task(), twice, twice], [new_task(), "t1"],
                             [new_task() for _ in range(1001)]]
        for batch in bad:
            with pytest.raises(InvalidInput):
                await store.create_many(batch)  # type: ignore[arg-type]
        assert [] == await _stored(store)

    async def test_bulk_holds_max_tasks_for_the_batch(
        self, make_store: MakeStore
    ) -> None:
        """With ``max_tasks=5`` and two tasks stored, a batch of four MUST be refused with
        ``CapacityExceeded("max_tasks")`` storing none of them; a batch of three fits.

        Troubleshooting: compare the stored tasks plus the whole batch with the limit in
        the atomic step (``storekit.check_stored_room``), never task by task.
        """
        store = await make_store(max_tasks=5)
        _require(store)
        await store.create(new_task())
        await finished_task(store, owner=MALLORY)
        four = [new_task() for _ in range(4)]
        with pytest.raises(CapacityExceeded) as caught:
            await store.create_many(four)
        assert "max_tasks" == caught.value.limit
        await _absent(store, four)
        assert 3 == len(await store.create_many(four[:3]))
        assert 5 == len(await _stored(store))

    async def test_bulk_holds_the_active_limit_per_tenant(
        self, make_store: MakeStore
    ) -> None:
        """With ``max_active_tasks_per_scope=3``, a batch MUST fit each tenant's live tasks
        plus its tasks of the batch within the limit, or be refused whole with
        ``CapacityExceeded("max_active_tasks_per_scope")`` — its tasks of a tenant with
        room not stored either; finished tasks do not count.

        Troubleshooting: group the batch by tenant and check each tenant's room for all
        of its tasks at once, before any insert.
        """
        store = await make_store(max_active_tasks_per_scope=3)
        _require(store)
        await store.create(new_task())
        await finished_task(store)
        fits = [new_task(), new_task(), new_task(owner=MALLORY), new_task(owner=MALLORY)]
        assert 4 == len(await store.create_many(fits))
        refused = [new_task(owner=MALLORY), new_task()]
        with pytest.raises(CapacityExceeded) as caught:
            await store.create_many(refused)
        assert "max_active_tasks_per_scope" == caught.value.limit
        await _absent(store, refused)
        assert 1 == len(await store.create_many(refused[:1]))
        crowd = [new_task(owner=Owner("carol", tenant="crowd")) for _ in range(4)]
        with pytest.raises(CapacityExceeded) as whole:  # a tenant with room for 3, not 4
            await store.create_many(crowd)
        assert "max_active_tasks_per_scope" == whole.value.limit
        await _absent(store, crowd)

    async def test_bulk_stores_the_batch_at_one_instant(self, make_store: MakeStore) -> None:
        """Every task of a batch MUST be created at one instant: on a clock that moves a
        millisecond at every read, the batch's tasks share their ``created_at``.

        Troubleshooting: read ``now`` once, after the batch's lock is held, and make every
        snapshot at it (``storekit.new_snapshots(batch, now)``), not one read per task.
        """
        store = await make_store(clock=_SteppingClock())
        _require(store)
        made = await store.create_many([new_task() for _ in range(3)])
        stored = [await store.get(s.id, tenant=None) for s in made]
        assert 1 == len({s.created_at for s in [*made, *stored]})

    @RACERS
    async def test_bulk_racing_batches_with_a_shared_id_have_one_winner(
        self, store: TaskStore, race: Racer
    ) -> None:
        """N batches racing, each of three tasks of its own and one id they all share,
        MUST end with exactly one batch stored whole and N−1 refused with
        ``TaskExists``, none of whose tasks are stored.

        Troubleshooting: the check of the ids and the insert are one atomic step (the
        creators' lock held from the read to the commit, or an insert that fails the
        whole transaction on a duplicate key); checking first lets two batches in.
        """
        _require(store)
        shared = new_task().id
        batches = [[new_task(), new_task(), new_task(shared), new_task()] for _ in range(N)]
        calls: list[Call] = [partial(store.create_many, batch) for batch in batches]
        results = await race(store, calls)
        won = [n for n, r in enumerate(results) if isinstance(r, list)]
        refused = [r for r in results if isinstance(r, TaskExists)]
        assert (1, N - 1) == (len(won), len(refused)), results
        assert sorted(new.id for new in batches[won[0]]) == await _stored(store)

    @RACERS
    async def test_bulk_racing_batches_stay_within_the_capacity(
        self, make_store: MakeStore, race: Racer
    ) -> None:
        """N batches of two racing against ``max_tasks=5`` with one task stored MUST end
        with exactly two batches stored whole and the others refused with
        ``CapacityExceeded``.

        Troubleshooting: count and insert in one atomic step, for the whole batch.
        """
        store = await make_store(max_tasks=5)
        _require(store)
        first = await store.create(new_task(owner=MALLORY))
        batches = [[new_task(), new_task()] for _ in range(N)]
        results = await race(store, [partial(store.create_many, b) for b in batches])
        won = [n for n, r in enumerate(results) if isinstance(r, list)]
        refused = [r for r in results if isinstance(r, CapacityExceeded)]
        assert (2, N - 2) == (len(won), len(refused)), results
        expected = [first.id, *(new.id for n in won for new in batches[n])]
        assert sorted(expected) == await _stored(store)


def live_new(snapshot: Snapshot) -> NewTask:
    """A new task of ``snapshot``'s id (and tenant)."""
    return new_task(snapshot.id, owner=snapshot.owner)
