"""Limits at exactly the limit and one past it: worker ids, batch sizes, the lease cap.

The values are written out (256, 1000, 604800 seconds), never computed from the constant
being checked: a test that derives its bad value from ``MAX_LEASE_S`` moves along with a
wrong constant and still passes.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from tasks_core import (
    Access,
    Cancelled,
    Completed,
    Event,
    InvalidInput,
    Lease,
    ManualClock,
    TaskNotFound,
    TaskStatus,
    TaskStore,
    Transition,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import ALICE, LEASE_S, access, new_task

Item = tuple[str, int, Event, Lease | Access]
SEVEN_DAYS = 604800
"""The lease cap, in seconds (7 × 86400), written out."""


async def _nothing_claimed(store: TaskStore, *task_ids: str) -> None:
    for task_id in task_ids:
        stored = await store.get(task_id, tenant=None)
        assert (TaskStatus.PENDING, 0, None) == (stored.status, stored.deliveries, stored.claim)


class LimitContract(ContractBase):
    """Limits at exactly the limit and one past it."""

    async def test_a_worker_id_of_256_characters_is_taken_and_257_refused(
        self, store: TaskStore
    ) -> None:
        """A worker id of exactly 256 characters MUST be accepted by ``claim`` and
        ``claim_next`` and kept whole (the lease and the stored claim carry it, and the
        lease works); one of 257 MUST raise ``InvalidInput`` and claim nothing.

        Troubleshooting: validate with ``tasks_core.rules.check_worker_id`` and size the
        column for 256 characters (not bytes of a narrower type): a column that silently
        cuts the id makes every later lease check of that worker fail.
        """
        first = await store.create(new_task())
        second = await store.create(new_task())
        too_long = "w" * 257
        with pytest.raises(InvalidInput):
            await store.claim(first.id, too_long, LEASE_S)
        with pytest.raises(InvalidInput):
            await store.claim_next(too_long, LEASE_S, queues=["default"])
        await _nothing_claimed(store, first.id, second.id)
        longest = "w" * 255 + "\u00e9"
        exact = await store.claim(first.id, longest, LEASE_S)
        [served] = await store.claim_next("v" * 256, LEASE_S, queues=["default"])
        assert (longest, "v" * 256) == (exact.lease.worker_id, served.lease.worker_id)
        stored = await store.get(first.id, tenant=None)
        assert stored.claim is not None
        assert longest == stored.claim.worker_id
        assert TaskStatus.RUNNING == (await store.worker_snapshot(exact.lease)).status
        assert TaskStatus.RUNNING == (await store.worker_snapshot(served.lease)).status

    async def test_a_worker_id_that_is_not_printable_is_refused(
        self, store: TaskStore
    ) -> None:
        """A worker id holding a character that is not printable (an escape sequence, a
        line break, a bidi override) MUST raise ``InvalidInput`` from ``claim`` and
        ``claim_next`` and claim nothing: log lines, the CLI and the dashboard show worker
        ids.

        Troubleshooting: validate with ``tasks_core.rules.check_worker_id``.
        """
        task = await store.create(new_task())
        for bad in ("w-\x1b]52;c;AAAA\x07", "w\nINFO forged", "w\u202e"):
            with pytest.raises(InvalidInput):
                await store.claim(task.id, bad, LEASE_S)
            with pytest.raises(InvalidInput):
                await store.claim_next(bad, LEASE_S, queues=["default"])
        await _nothing_claimed(store, task.id)

    async def test_claim_next_takes_a_limit_of_1000_and_refuses_1001(
        self, store: TaskStore
    ) -> None:
        """``claim_next(limit=1000)`` MUST be accepted (claiming every claimable task up
        to it); ``limit=1001`` MUST raise ``InvalidInput`` and claim nothing.

        Troubleshooting: validate with ``tasks_core.rules.check_limit(limit,
        maximum=rules.MAX_BATCH)``: the bound is inclusive.
        """
        ids = [(await store.create(new_task())).id for _ in range(3)]
        with pytest.raises(InvalidInput):
            await store.claim_next("w1", LEASE_S, queues=["default"], limit=1001)
        await _nothing_claimed(store, *ids)
        got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=1000)
        assert sorted(ids) == sorted(c.snapshot.id for c in got)

    async def test_transition_many_takes_1000_items_and_refuses_1001(
        self, store: TaskStore
    ) -> None:
        """``transition_many`` (capability ``batch_transitions``) with exactly 1000 items
        MUST decide every one of them; with 1001 it MUST raise ``InvalidInput`` and write
        none of them.

        Troubleshooting: validate with ``tasks_core.rules.check_batch`` before the atomic
        step: the bound is inclusive.
        """
        if not store.capabilities.batch_transitions:
            pytest.skip("store capability 'batch_transitions' is off")
        created = await store.create(new_task())

        def items(count: int) -> list[Item]:
            first: Item = (created.id, 0, Cancelled(event_id="stop"), access(ALICE))
            return [first] + [(f"missing-{n}", 0, Cancelled(event_id=f"c{n}"), access(ALICE))
                              for n in range(count - 1)]

        with pytest.raises(InvalidInput):
            await store.transition_many(items(1001))
        assert 0 == (await store.get(created.id, tenant=None)).revision
        results = await store.transition_many(items(1000))
        assert 1000 == len(results)
        assert isinstance(results[0], Transition)
        assert "applied" == results[0].outcome
        assert all(isinstance(result, TaskNotFound) for result in results[1:])

    async def test_reap_without_a_limit_deletes_1000_and_leaves_the_1001st(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``reap()`` without ``limit`` MUST delete at most 1000 expired tasks (the
        default of ``TaskStore.reap``): of 1001, one is left for the next call.

        Troubleshooting: default ``limit`` to 1000 in your ``reap`` signature and apply
        it in the selecting query.
        """
        ids = {(await store.create(new_task(ttl_s=1))).id for _ in range(1001)}
        clock.advance(1)
        first = await store.reap()
        assert 1000 == len(first)
        rest = await store.reap()
        assert 1 == len(rest)
        assert ids == {*first, *rest}

    @pytest.mark.parametrize("too_long", [604800.001, 604801])
    async def test_a_lease_of_exactly_7_days_is_taken_and_longer_refused(
        self, store: TaskStore, clock: ManualClock, too_long: float
    ) -> None:
        """A ``lease_for`` of exactly 604800 seconds (7 days) MUST be accepted by
        ``claim``, ``claim_next`` and ``renew`` and expire exactly 7 days on; a millisecond
        or a second more MUST raise ``InvalidInput`` and claim (or renew) nothing.

        Troubleshooting: validate with ``tasks_core.rules.check_lease_for``; the cap is
        inclusive, and a store must refuse a longer lease rather than cut it down.
        """
        first = await store.create(new_task())
        second = await store.create(new_task())
        with pytest.raises(InvalidInput):
            await store.claim(first.id, "w1", too_long)
        with pytest.raises(InvalidInput):
            await store.claim_next("w1", too_long, queues=["default"])
        await _nothing_claimed(store, first.id, second.id)
        week = timedelta(seconds=SEVEN_DAYS)
        held = await store.claim(first.id, "w1", SEVEN_DAYS)
        [served] = await store.claim_next("w2", SEVEN_DAYS, queues=["default"])
        assert (clock.now() + week, clock.now() + week) == (
            held.lease.expires_at, served.lease.expires_at)
        done = await store.transition(second.id, 0, Completed(event_id="done"), served.lease)
        assert "applied" == done.outcome
        clock.advance(1)
        with pytest.raises(InvalidInput):
            await store.renew(held.lease, too_long)
        renewed = await store.renew(held.lease, SEVEN_DAYS)
        assert clock.now() + week == renewed.lease.expires_at
        clock.advance(SEVEN_DAYS - 0.001)
        assert [] == await store.claim_next("w3", LEASE_S, queues=["default"])
        clock.advance(0.001)
        assert [first.id] == [
            c.snapshot.id for c in await store.claim_next("w3", LEASE_S, queues=["default"])
        ]
