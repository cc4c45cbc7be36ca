"""claim() and claim_next(): who gets which task, in which order, and how often."""

from __future__ import annotations

import asyncio
import math
import threading
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
from tasks_core import (
    Claim,
    InputRequested,
    InvalidInput,
    ManualClock,
    RetryPolicy,
    RetryRequested,
    TaskNotFound,
    TaskStatus,
    TaskStore,
    Unavailable,
)
from tasks_core.random_ids import random_task_id

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    ALICE,
    LEASE_S,
    MALLORY,
    claim,
    created_and_claimed,
    finished_task,
    new_task,
)

CLAIMERS = 8
TASKS = 40


def _ids(claims: Sequence[Claim]) -> list[str]:
    return [c.snapshot.id for c in claims]


async def _drain(store: TaskStore, worker: str, queues: Sequence[str], limit: int) -> list[Claim]:
    """Claim until ``claim_next`` comes back empty (the clock does not move); bounded, so a
    store that serves the same task again cannot loop forever."""
    got: list[Claim] = []
    for _ in range(TASKS + 1):
        batch = await store.claim_next(worker, LEASE_S, queues=queues, limit=limit)
        if not batch:
            break
        got.extend(batch)
    return got


class ClaimContract(ContractBase):
    """claim() and claim_next(): who gets which task, in which order, and how often."""

    # -- claim(): one exact task -------------------------------------------------------

    async def test_claim_returns_running_snapshot_and_first_lease(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim`` MUST return the task as ``running`` with ``deliveries == 1`` and a
        lease of generation 1 for the worker that expires ``lease_for`` seconds from the
        store clock; the snapshot's ``claim`` MUST describe that lease (without the token).

        Troubleshooting: compute ``expires_at`` from the store clock (the injected one in
        tests), truncated to milliseconds, and store the generation as the previous maximum
        plus one. ``running`` is derived: pending plus a live lease.
        """
        created = await store.create(new_task())
        snapshot, lease = await claim(store, created.id, worker="w-7", lease_for=12.5)
        expires = clock.now() + timedelta(seconds=12.5)
        assert TaskStatus.RUNNING == snapshot.status
        assert 1 == snapshot.deliveries
        assert (created.id, "w-7", 1, expires) == (
            lease.task_id, lease.worker_id, lease.generation, lease.expires_at
        )
        assert snapshot.claim is not None
        assert ("w-7", 1, expires) == (
            snapshot.claim.worker_id, snapshot.claim.generation, snapshot.claim.expires_at
        )
        assert lease.token
        stored = await store.get(created.id, tenant=None)
        assert (TaskStatus.RUNNING, 1) == (stored.status, stored.deliveries)

    async def test_second_claim_is_refused_while_lease_is_live(self, store: TaskStore) -> None:
        """A second ``claim`` of a task whose lease is live MUST raise ``Unavailable`` and
        leave the first lease in force.

        Troubleshooting: check and write the lease in one atomic step (row lock,
        conditional update, or compare-and-set on the lease generation).
        """
        first = await created_and_claimed(store)
        with pytest.raises(Unavailable):
            await claim(store, first.snapshot.id, worker="w2")
        again = await store.worker_snapshot(first.lease)
        assert (1, "w1") == (again.deliveries, again.claim.worker_id if again.claim else None)

    @pytest.mark.parametrize("end", ["completed", "failed", "cancelled"])
    async def test_claim_of_terminal_task_is_unavailable(self, store: TaskStore, end: str) -> None:
        """``claim`` of a completed, failed or cancelled task MUST raise ``Unavailable``.

        Troubleshooting: a cancelled task keeps its holder's lease live (so the worker
        learns of the cancel), but a terminal task is never claimable — check terminal
        status before the lease.
        """
        done = await finished_task(store, end)
        with pytest.raises(Unavailable):
            await claim(store, done.id, worker="w2")
        assert done.deliveries == (await store.get(done.id, tenant=None)).deliveries

    async def test_claim_of_waiting_input_task_is_unavailable(self, store: TaskStore) -> None:
        """``claim`` of a task waiting for input MUST raise ``Unavailable``, even when no
        lease is live.

        Troubleshooting: ``waiting_input`` is a stored status; it becomes claimable only
        once every outstanding question is answered.
        """
        snapshot, lease = await created_and_claimed(store)
        asked = await store.transition(
            snapshot.id, 0, InputRequested(event_id="ask", key="approve"), lease
        )
        assert TaskStatus.WAITING_INPUT == asked.snapshot.status
        await store.release(lease)
        with pytest.raises(Unavailable):
            await claim(store, snapshot.id, worker="w2")

    async def test_claim_of_unknown_task_raises_task_not_found(self, store: TaskStore) -> None:
        """``claim`` of an id that was never created MUST raise ``TaskNotFound``.

        Troubleshooting: map "no row" to ``TaskNotFound``, not ``Unavailable`` or ``None``.
        """
        with pytest.raises(TaskNotFound):
            await claim(store, "never-created")

    @pytest.mark.parametrize(
        "lease_for", [0, -1, math.nan, math.inf, 604801, True, "30"]
    )
    async def test_claim_with_bad_lease_for_is_invalid_and_claims_nothing(
        self, store: TaskStore, lease_for: Any
    ) -> None:
        """``claim`` and ``claim_next`` with a ``lease_for`` that is not a finite number of
        seconds in (0, 7 days] MUST raise ``InvalidInput`` and claim nothing.

        Troubleshooting: validate with ``tasks_core.rules.check_lease_for`` before touching
        the record; a bool is not a number of seconds.
        """
        created = await store.create(new_task())
        with pytest.raises(InvalidInput):
            await store.claim(created.id, "w1", lease_for)
        with pytest.raises(InvalidInput):
            await store.claim_next("w1", lease_for, queues=["default"])
        stored = await store.get(created.id, tenant=None)
        assert (TaskStatus.PENDING, 0, None) == (stored.status, stored.deliveries, stored.claim)

    # -- claim_next(): order and filters ------------------------------------------------

    async def test_claim_next_on_empty_store_returns_nothing(self, store: TaskStore) -> None:
        """``claim_next`` on a store without claimable tasks MUST return ``[]``.

        Troubleshooting: return an empty list; do not raise and do not block.
        """
        assert [] == await store.claim_next("w1", LEASE_S, queues=["default"], limit=5)

    async def test_claim_next_serves_oldest_first_by_created_at_then_id(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim_next`` MUST hand out tasks ordered by ``created_at``, then by id.

        Troubleshooting: order by ``(created_at, id)``, not by id alone or insertion
        order. Here ``b`` was created first although ``a`` sorts first by id, and ``c1`` and
        ``c2`` share a creation instant.
        """
        for task in ("zz-b", "zz-a"):
            await store.create(new_task(task))
            clock.advance(1)
        await store.create(new_task("zz-c2"))
        await store.create(new_task("zz-c1"))
        got = [
            _ids(await store.claim_next("w1", LEASE_S, queues=["default"]))
            for _ in range(4)
        ]
        assert [["zz-b"], ["zz-a"], ["zz-c1"], ["zz-c2"]] == got

    async def test_random_ids_made_in_one_instant_are_served_in_the_order_made(
        self, store: TaskStore
    ) -> None:
        """Tasks without a key get ids from ``random_task_id``, which grow with every id a
        process makes, so that tasks created within one store millisecond (here: the
        frozen clock) MUST still be served in the order they were made — a
        ``concurrency=1`` queue stays FIFO.

        Troubleshooting: compare ids as plain byte strings (PostgreSQL: ``COLLATE "C"``;
        MariaDB: a binary collation): a random id's digits are ``-``, ``0-9``, ``A-Z``,
        ``_`` and ``a-z`` in code-point order, which a collation that ignores case or
        punctuation sorts differently. (65 ids: the last digit of the growing part takes
        every one of its 64 values.)
        """
        made = [random_task_id() for _ in range(65)]
        for task in made:
            await store.create(new_task(task))
        got = [
            _ids(await store.claim_next("w1", LEASE_S, queues=["default"]))[0]
            for _ in made
        ]
        assert got == made

    async def test_claim_next_serves_oldest_first_across_its_queues(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """With several queues, ``claim_next`` MUST serve the oldest task of all of them,
        not the oldest of one queue and then the next queue.

        Troubleshooting: order the candidates of every listed queue together (one query,
        or a merge of per-queue orders) before applying ``limit``.
        """
        created = []
        for queue in ("pdf", "mail", "pdf", "mail"):
            created.append((await store.create(new_task(queue=queue))).id)
            clock.advance(1)
        got = [
            _ids(await store.claim_next("w1", LEASE_S, queues=["mail", "pdf"]))
            for _ in range(4)
        ]
        assert [[task_id] for task_id in created] == got

    async def test_claim_next_serves_lapsed_leases_due_retries_and_new_tasks_by_available_instant(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A lapsed lease, a due retry and never-claimed tasks MUST be served together by
        available instant (``rules.available_at``: a due retry's ``retry_at``, else the
        creation), while live leases and retries not yet due are passed over.

        Troubleshooting: whatever the query is built from (one scan, or one per kind of
        claimable row, merged), order all candidates by ``(available instant, id)`` before
        applying ``limit``. Here the retry fell due after ``fresh1`` and ``fresh2`` were
        created, so it comes after them although it was created before.
        """
        ids = {}
        for name, retry in (("lapsed", None), ("retried", 5), ("running", None),
                            ("waiting", 600), ("fresh1", None), ("fresh2", None)):
            policy = RetryPolicy.fixed(retry, attempts=3) if retry else None
            ids[name] = (await store.create(new_task(retry=policy))).id
            clock.advance(1)
        await store.claim(ids["lapsed"], "w0", 2)
        await store.claim(ids["running"], "w0", LEASE_S)
        for name in ("retried", "waiting"):
            held = await store.claim(ids[name], "w0", LEASE_S)
            await store.transition(ids[name], held.snapshot.revision,
                                   RetryRequested(event_id=f"r-{name}", error="E"), held.lease)
        clock.advance(10)  # past the lapsed lease and the first retry; not the others

        got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=10)

        assert [ids[n] for n in ("lapsed", "fresh1", "fresh2", "retried")] == _ids(got)

    async def test_claim_next_only_serves_the_given_queues(self, store: TaskStore) -> None:
        """``claim_next`` MUST return tasks of the listed queues only.

        Troubleshooting: filter on the task's queue inside the claiming query.
        """
        wanted = [(await store.create(new_task(queue=q))).id for q in ("mail", "pdf", "mail")]
        other = await store.create(new_task(queue="video"))
        got = await store.claim_next("w1", LEASE_S, queues=["mail", "pdf"], limit=10)
        assert sorted(wanted) == sorted(_ids(got))
        assert TaskStatus.PENDING == (await store.get(other.id, tenant=None)).status

    async def test_claim_next_claims_up_to_limit_oldest_first(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim_next(limit=n)`` MUST claim at most ``n`` tasks in one call, the oldest
        ones, each with its own lease.

        Troubleshooting: apply the limit after ordering; give every claimed task its own
        token and generation.
        """
        ids = []
        for _ in range(5):
            ids.append((await store.create(new_task())).id)
            clock.advance(0.001)
        got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=3)
        assert ids[:3] == _ids(got)
        assert 3 == len({c.lease.token for c in got})
        assert all(TaskStatus.RUNNING == c.snapshot.status for c in got)
        assert all((1, 1) == (c.lease.generation, c.snapshot.deliveries) for c in got)

    async def test_claim_next_skips_leased_terminal_waiting_and_deferred_tasks(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim_next`` MUST skip tasks under a live lease, terminal tasks, tasks waiting
        for input and tasks whose retry is not due, and still serve the claimable one.

        Troubleshooting: the claimable filter is "not terminal, not expired, not
        waiting_input, no live lease, retry_at absent or due" (``rules.is_claimable``).
        """
        leased = await created_and_claimed(store)
        done = await finished_task(store, "completed")
        waiting = await created_and_claimed(store)
        await store.transition(
            waiting.snapshot.id, 0, InputRequested(event_id="ask", key="k"), waiting.lease
        )
        await store.release(waiting.lease)
        retrying = await created_and_claimed(store, retry=RetryPolicy.fixed(60, attempts=3))
        await store.transition(
            retrying.snapshot.id, 0, RetryRequested(event_id="r", error="E"), retrying.lease
        )
        clock.advance(1)
        ready = await store.create(new_task())
        skipped = [leased.snapshot.id, done.id, waiting.snapshot.id, retrying.snapshot.id]
        got = await store.claim_next("w2", LEASE_S, queues=["default"], limit=10)
        assert [ready.id] == _ids(got)
        assert [1, 1, 1, 1] == [(await store.get(i, tenant=None)).deliveries for i in skipped]

    async def test_claim_next_includes_tasks_whose_lease_expired(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim_next`` MUST serve a task whose lease expired by the store clock — from
        the exact expiry instant on, not before.

        Troubleshooting: a lease is live while ``now < expires_at``; compare against the
        store clock, and do not require the old worker to release first.
        """
        first = await created_and_claimed(store)
        clock.advance(LEASE_S - 0.001)
        assert [] == await store.claim_next("w2", LEASE_S, queues=["default"])
        clock.advance(0.001)
        got = await store.claim_next("w2", LEASE_S, queues=["default"])
        assert [first.snapshot.id] == _ids(got)
        assert (2, "w2", 2) == (
            got[0].lease.generation, got[0].lease.worker_id, got[0].snapshot.deliveries
        )

    async def test_claim_next_serves_every_tenant(self, store: TaskStore) -> None:
        """``claim_next`` MUST serve the queues across tenants: workers are not scoped to
        a tenant (a lease ignores tenant).

        Troubleshooting: do not filter claims by tenant.
        """
        ours = await store.create(new_task(owner=ALICE))
        theirs = await store.create(new_task(owner=MALLORY))
        got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=5)
        assert sorted([ours.id, theirs.id]) == sorted(_ids(got))

    @pytest.mark.parametrize(
        ("queues", "limit"),
        [
            ("default", 1),
            ([], 1),
            (["bad::queue"], 1),
            ([""], 1),
            (["default"], 0),
            (["default"], -1),
            (["default"], True),
        ],
        ids=["queues-str", "queues-empty", "queue-sep", "queue-blank", "limit-0", "limit-neg",
             "limit-bool"],
    )
    async def test_claim_next_with_bad_arguments_is_invalid_and_claims_nothing(
        self, store: TaskStore, queues: Any, limit: Any
    ) -> None:
        """``claim_next`` with a bare string or empty list of queues, an invalid queue name
        or a ``limit`` that is not a positive integer MUST raise ``InvalidInput`` and claim
        nothing.

        Troubleshooting: validate every argument before the claiming query; a string is
        iterable, so refuse it explicitly instead of claiming from queues "d", "e", "f"…
        """
        created = await store.create(new_task())
        with pytest.raises(InvalidInput):
            await store.claim_next("w1", LEASE_S, queues=queues, limit=limit)
        stored = await store.get(created.id, tenant=None)
        assert (TaskStatus.PENDING, 0) == (stored.status, stored.deliveries)

    # -- claim_next(): races ---------------------------------------------------------------

    async def test_concurrent_claim_next_never_shares_a_task(self, store: TaskStore) -> None:
        """Concurrent ``claim_next`` calls from many coroutines MUST hand every task to
        exactly one lease: together they claim each task once, none twice.

        Troubleshooting: claiming must be one atomic step per task (``SELECT … FOR UPDATE
        SKIP LOCKED`` then update, or a conditional update on the lease generation that
        checks the affected row count). A read-then-write without a lock hands a task to
        two workers.
        """
        ids = {(await store.create(new_task())).id for _ in range(TASKS)}
        start = anyio.Event()
        got: dict[str, list[Claim]] = {}

        async def claimer(worker: str) -> None:
            await start.wait()
            got[worker] = await _drain(store, worker, ["default"], limit=2)

        async with anyio.create_task_group() as group:
            for n in range(CLAIMERS):
                group.start_soon(claimer, f"w{n}")
            await anyio.lowlevel.checkpoint()
            start.set()
        claimed = [c for batch in got.values() for c in batch]
        assert {} == {k: v for k, v in Counter(_ids(claimed)).items() if v > 1}
        assert ids == set(_ids(claimed))
        assert {1} == {c.lease.generation for c in claimed}

    async def test_claim_next_from_threads_never_shares_a_task(self, store: TaskStore) -> None:
        """``claim_next`` called from several threads, each with its own event loop, on
        the same store object MUST hand every task to exactly one lease.

        Troubleshooting: a store object is shared by the threads of a sync web app (via
        the sync facade). Guard in-process state with a thread lock, and do not bind
        connections to the event loop that opened the store (use a pool that opens
        connections per loop, or a driver that is loop-agnostic).
        """
        ids = {(await store.create(new_task())).id for _ in range(TASKS)}
        barrier = threading.Barrier(CLAIMERS)
        got: dict[str, list[Claim]] = {}

        def claimer(worker: str) -> None:
            barrier.wait(timeout=30)
            got[worker] = asyncio.run(_drain(store, worker, ["default"], limit=1))

        async with anyio.create_task_group() as group:
            for n in range(CLAIMERS):
                group.start_soon(anyio.to_thread.run_sync, claimer, f"t{n}")
        claimed = [c for batch in got.values() for c in batch]
        assert CLAIMERS == len(got)
        assert {} == {k: v for k, v in Counter(_ids(claimed)).items() if v > 1}
        assert ids == set(_ids(claimed))
