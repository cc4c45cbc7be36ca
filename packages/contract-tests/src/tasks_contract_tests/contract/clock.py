"""The store's own clock path: the one small group that runs on real time.

Every other test injects a ``ManualClock``; these open the store with ``clock=None`` so it
uses its authoritative time (database or server time), and they are the only tests that
may sleep — briefly, and bounded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import anyio
from tasks_core import Claim, Completed, TaskStatus, TaskStore

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import LEASE_S, new_task

MakeStore = Callable[..., Awaitable[TaskStore]]
SKEW = timedelta(seconds=5)
"""How far the store's clock may be from this process's clock."""
POLL_S = 0.01
POLL_FOR_S = 5.0


def _whole_ms(value: datetime) -> bool:
    return value.microsecond % 1000 == 0


class RealClockContract(ContractBase):
    """The store's own clock path: the one small group that runs on real time."""

    async def test_store_now_is_aware_utc_in_whole_milliseconds(
        self, make_store: MakeStore
    ) -> None:
        """``await store.now()`` on the store's own clock MUST be timezone-aware UTC, in
        whole milliseconds, within a few seconds of this process's clock, and never go back
        between calls.

        Troubleshooting: read database/server time (``clock_timestamp()``, ``$$NOW``…),
        convert it to an aware UTC ``datetime`` and truncate with ``rules.tick``. A naive
        value usually means the driver dropped the time zone.
        """
        store = await make_store(clock=None)
        samples = [await store.now() for _ in range(20)]
        local = datetime.now(UTC)
        assert all(s.utcoffset() == timedelta(0) for s in samples)
        assert all(_whole_ms(s) for s in samples)
        assert abs(local - samples[-1]) < SKEW
        assert samples == sorted(samples)

    async def test_lease_expires_on_the_store_clock(self, make_store: MakeStore) -> None:
        """A lease of ``lease_for=0.05`` MUST expire on the store's own clock: a later
        ``claim_next`` (polled for at most a few seconds) serves the task again with a new
        generation.

        Troubleshooting: compare ``expires_at`` with the store clock sampled inside the
        claiming statement; mixing the client clock with database time makes leases expire
        early or never.
        """
        store = await make_store(clock=None)
        created = await store.create(new_task())
        [first] = await store.claim_next("w1", 0.05, queues=["default"])
        again: list[Claim] = []
        with anyio.move_on_after(POLL_FOR_S):
            while not again:
                await anyio.sleep(POLL_S)
                again = await store.claim_next("w2", LEASE_S, queues=["default"])
        assert [created.id] == [c.snapshot.id for c in again]
        assert first.lease.generation + 1 == again[0].lease.generation
        assert first.lease.expires_at <= await store.now()

    async def test_instants_come_from_the_store_clock(self, make_store: MakeStore) -> None:
        """``created_at``, lease ``expires_at`` and ``committed_at`` MUST come from the
        store's clock: between ``store.now()`` readings taken around the call (a commit may
        sit one millisecond past the previous write, never more).

        Troubleshooting: stamp instants inside the store (database time, sampled after the
        row lock is held), never with the client's clock or a value passed in.
        """
        store = await make_store(clock=None)
        before = await store.now()
        created = await store.create(new_task())
        [held] = await store.claim_next("w1", LEASE_S, queues=["default"])
        done = await store.transition(created.id, 0, Completed(event_id="d"), held.lease)
        after = await store.now()
        assert done.committed_at is not None
        assert done.outcome == "applied"
        assert before <= created.created_at <= after
        lease_start = held.lease.expires_at - timedelta(seconds=LEASE_S)
        assert before <= lease_start <= after
        assert before <= done.committed_at <= after + timedelta(milliseconds=1)
        assert (TaskStatus.COMPLETED, done.committed_at) == (
            done.snapshot.status, done.snapshot.finished_at
        )

    async def test_live_lease_is_not_served_again_on_the_store_clock(
        self, make_store: MakeStore
    ) -> None:
        """Right after a claim, a lease of a few seconds MUST still be live on the store
        clock: ``claim_next`` serves nothing.

        Troubleshooting: a store that mixes clocks (client time for ``expires_at``, database
        time for the check) can see a fresh lease as already expired.
        """
        store = await make_store(clock=None)
        await store.create(new_task())
        await store.claim_next("w1", 5.0, queues=["default"])
        assert [] == await store.claim_next("w2", LEASE_S, queues=["default"])
