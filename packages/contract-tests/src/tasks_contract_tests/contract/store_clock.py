"""An injected clock is the store clock: ``now()`` reads it, and every instant comes from
it in whole milliseconds. (The store's own clock is ``RealClockContract``'s.)"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from tasks_core import Completed, ManualClock, TaskStore

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import LEASE_S, new_task

MakeStore = Callable[..., Awaitable[TaskStore]]
START = datetime(2031, 5, 6, 7, 8, 9, 123756, tzinfo=UTC)
"""An instant between two milliseconds, nearer the later one."""
START_MS = datetime(2031, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
"""``START`` in whole milliseconds (truncated)."""


class FineClock:
    """An injected clock with microseconds, moved by hand (``ManualClock`` keeps to whole
    milliseconds)."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            self._now += delta


class StoreClockContract(ContractBase):
    """An injected clock is the store clock, read in whole milliseconds."""

    async def test_now_reads_the_injected_clock(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """With a ``clock`` injected, ``await store.now()`` MUST return that clock's
        instant — and follow it when it moves.

        Troubleshooting: ``now()`` returns ``rules.tick(clock.now())`` whenever a clock
        was given, and the database or server time only when none was. The runtime reads
        ``now()`` for its own deadlines (timeouts, retries, the reaper), so a ``now()``
        that ignores the clock puts the runtime and the store on different times.
        """
        assert clock.now() == await store.now()
        clock.advance(3600.25)
        assert clock.now() == await store.now()

    async def test_instants_of_an_injected_clock_are_truncated_to_milliseconds(
        self, make_store: MakeStore
    ) -> None:
        """An injected clock between two milliseconds MUST be read truncated to the whole
        millisecond (never rounded): by ``now()``, ``created_at``, a lease's
        ``expires_at`` and ``committed_at`` alike.

        Troubleshooting: truncate every clock reading with ``rules.tick`` before using it;
        rounding, or keeping the microseconds, makes a store (MongoDB: milliseconds)
        read back something other than it wrote, and two backends disagree.
        """
        clock = FineClock(START)
        store = await make_store(clock=clock)
        assert START_MS == await store.now()
        created = await store.create(new_task())
        held = await store.claim(created.id, "w1", LEASE_S)
        assert (START_MS, START_MS + timedelta(seconds=LEASE_S)) == (
            created.created_at, held.lease.expires_at)
        clock.advance(timedelta(seconds=2))
        done = await store.transition(created.id, 0, Completed(event_id="d"), held.lease)
        assert done.record is not None
        assert (START_MS + timedelta(seconds=2),) * 2 == (
            done.record.committed_at, await store.now())

    async def test_next_available_is_aware_utc_in_whole_milliseconds(
        self, make_store: MakeStore
    ) -> None:
        """``next_available`` MUST answer as ``now()`` does — an aware UTC ``datetime`` in
        whole milliseconds — the instant the task was stored with (a ``run_at`` given with
        microseconds rounded up to the millisecond).

        Troubleshooting: convert what the database returns to UTC (``astimezone(UTC)``)
        and never to the server's or the session's time zone; an aware value in another
        zone compares equal but prints, logs and serializes as another time.
        """
        clock = FineClock(START)
        store = await make_store(clock=clock)
        created = await store.create(new_task(run_at=START + timedelta(seconds=5)))
        await store.create(new_task(delay_s=9))
        answer = await store.next_available(["default"])
        assert answer is not None
        assert timedelta(0) == answer.utcoffset()
        assert (START_MS + timedelta(seconds=5, milliseconds=1),) * 2 == (
            answer, created.run_at)
        assert 0 == answer.microsecond % 1000
