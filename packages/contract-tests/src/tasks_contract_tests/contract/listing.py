"""list(): filters and keyset paging."""

from __future__ import annotations

from tasks_core import (
    Cancelled,
    InputRequested,
    ManualClock,
    Owner,
    TaskQuery,
    TaskStatus,
    TaskStore,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    ALICE,
    BOB,
    LEASE_S,
    MALLORY,
    access,
    created_and_claimed,
    finished_task,
    new_task,
)


async def ids(store: TaskStore, query: TaskQuery) -> list[str]:
    """The ids ``list`` returns for ``query``."""
    return [snapshot.id for snapshot in await store.list(query)]


class ListingContract(ContractBase):
    """list(): filters and keyset paging."""

    async def test_list_filters_by_tenant(self, store: TaskStore) -> None:
        """``list`` MUST return only the given tenant's tasks; ``tenant=None`` (System) MUST
        return every tenant's.

        Troubleshooting: ``tenant=None`` means "no tenant filter", not "tasks without a
        tenant".
        """
        ours = sorted([(await store.create(new_task())).id, (await store.create(new_task())).id])
        theirs = (await store.create(new_task(owner=MALLORY))).id
        acme = (await store.create(new_task(owner=Owner("eve", tenant="acme")))).id
        assert ours == await ids(store, TaskQuery(tenant="default"))
        assert [theirs] == await ids(store, TaskQuery(tenant="evil"))
        assert sorted([*ours, theirs, acme]) == await ids(store, TaskQuery(tenant=None))

    async def test_list_filters_by_principal_as_owner_or_watcher(self, store: TaskStore) -> None:
        """``principal`` MUST match tasks the principal owns or watches, and nothing else
        (a same-named user of another tenant is another principal).

        Troubleshooting: match ``owner == principal OR principal IN watchers``, comparing
        user id *and* tenant.
        """
        owned = (await store.create(new_task(owner=ALICE))).id
        watched = (await store.create(new_task(owner=BOB, watchers=(ALICE,)))).id
        bobs = (await store.create(new_task(owner=BOB))).id
        await store.create(new_task(owner=None, tenant="default"))
        assert sorted([owned, watched]) == await ids(
            store, TaskQuery(tenant="default", principal=ALICE)
        )
        assert sorted([watched, bobs]) == await ids(store, TaskQuery(tenant=None, principal=BOB))
        assert [] == await ids(store, TaskQuery(tenant=None, principal=Owner("alice", "evil")))

    async def test_list_filters_by_status_including_derived_running(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``statuses`` MUST filter on the status as ``get`` presents it: a task under a live
        lease is ``running``, one whose lease expired is ``pending`` again; listed
        snapshots MUST equal what ``get`` returns.

        Troubleshooting: ``running`` is derived from the lease expiry at the store clock;
        filter after deriving it (or translate it into a condition on the lease expiry),
        never on a stored ``running`` flag.
        """
        stale, _ = await created_and_claimed(store)
        clock.advance(LEASE_S)  # the lease of ``stale`` has expired: pending again
        pending = await store.create(new_task())
        running, _ = await created_and_claimed(store)
        waiting, lease = await created_and_claimed(store)
        await store.transition(waiting.id, 0, InputRequested(event_id="q", key="k"), lease)
        completed = await finished_task(store)
        cancelled = await store.create(new_task())
        await store.transition(cancelled.id, 0, Cancelled(event_id="c"), access(ALICE))

        def query(*statuses: TaskStatus) -> TaskQuery:
            return TaskQuery(tenant="default", statuses=frozenset(statuses))

        assert [running.id] == await ids(store, query(TaskStatus.RUNNING))
        assert sorted([stale.id, pending.id]) == await ids(store, query(TaskStatus.PENDING))
        assert [waiting.id] == await ids(store, query(TaskStatus.WAITING_INPUT))
        assert sorted([completed.id, cancelled.id]) == await ids(
            store, query(TaskStatus.COMPLETED, TaskStatus.CANCELLED)
        )
        for snapshot in await store.list(TaskQuery(tenant=None)):
            assert await store.get(snapshot.id, tenant=None) == snapshot

    async def test_list_filters_by_queue(self, store: TaskStore) -> None:
        """``queue`` MUST return only the tasks of that queue.

        Troubleshooting: compare the queue name exactly (case-sensitive).
        """
        mails = sorted([(await store.create(new_task(queue="mail"))).id for _ in range(2)])
        await store.create(new_task(queue="Mail"))
        await store.create(new_task())
        assert mails == await ids(store, TaskQuery(tenant="default", queue="mail"))
        assert [] == await ids(store, TaskQuery(tenant="default", queue="none"))

    async def test_keyset_paging_visits_every_task_once_in_id_order(
        self, store: TaskStore
    ) -> None:
        """Paging with ``after`` (the last id of the previous page) and ``limit`` MUST
        return every task exactly once in id order (not creation order), full pages until
        a short one marks the end; ``after`` need not be an existing id.

        Troubleshooting: ``WHERE id > :after ORDER BY id LIMIT :limit`` with a binary
        (byte-order) collation; never OFFSET paging.
        """
        names = ["m", "c", "x", "a", "k", "B", "z"]
        for name in names:
            await store.create(new_task(f"page-{name}"))
        pages: list[list[str]] = []
        after: str | None = None
        while True:
            page = await ids(store, TaskQuery(tenant="default", after=after, limit=3))
            pages.append(page)
            if len(page) < 3:
                break
            after = page[-1]
        assert [3, 3, 1] == [len(page) for page in pages]
        assert sorted(f"page-{name}" for name in names) == [i for page in pages for i in page]
        assert ["page-k", "page-m"] == await ids(
            store, TaskQuery(tenant="default", after="page-d", limit=2)
        )

    async def test_filtered_out_and_expired_tasks_do_not_shorten_a_page(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """Expired tasks and tasks failing a filter MUST be left out *before* the limit
        applies, so a page is full unless it is the last.

        Troubleshooting: put every filter (tenant, expiry, status, queue, principal) in the
        query and apply ``LIMIT`` after them; filtering a fetched page in Python returns
        short pages early and stops the caller's paging.
        """
        await store.create(new_task("f-a"))
        await store.create(new_task("f-b", ttl_s=1))
        await store.create(new_task("f-c", owner=MALLORY))
        await store.create(new_task("f-d"))
        await store.create(new_task("f-e"))
        clock.advance(1)
        assert ["f-a", "f-d"] == await ids(store, TaskQuery(tenant="default", limit=2))
        assert ["f-e"] == await ids(store, TaskQuery(tenant="default", after="f-d", limit=2))
