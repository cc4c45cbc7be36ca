"""The in-process wakeups of ``MemoryStore`` (``Wakeups``): who is woken, what is kept
for a later wait, and that closing wakes every waiter at once."""

from __future__ import annotations

import asyncio
import threading
import time

from tasks_store_memory._wakeups import Wakeups


def test_notify_wakes_the_queue_s_waiters_and_keeps_the_others() -> None:
    async def main() -> tuple[bool, bool]:
        wakeups = Wakeups(threading.Lock())
        on_a = asyncio.ensure_future(wakeups.wait_for_work(frozenset({"a"}), 5))
        on_b = asyncio.ensure_future(wakeups.wait_for_work(frozenset({"b"}), 5))
        await asyncio.sleep(0.01)
        wakeups.notify("a")
        woken_a = await asyncio.wait_for(on_a, 2)
        assert not on_b.done()
        wakeups.notify("b")
        return woken_a, await asyncio.wait_for(on_b, 2)

    assert (True, True) == asyncio.run(main())


def test_10000_unreported_cancels_are_kept_and_the_10001st_drops_the_oldest() -> None:
    async def main() -> tuple[set[str], set[str], set[str]]:
        wakeups = Wakeups(threading.Lock())
        for n in range(10_000):
            wakeups.notify_cancel(f"t{n}")
        kept = await wakeups.wait_for_cancels(["t0"], 0.01)
        wakeups.notify_cancel("t0")  # the newest again: 10_000 kept
        wakeups.notify_cancel("t10000")  # 10_001: t1, the oldest, goes
        dropped = await wakeups.wait_for_cancels(["t1"], 0.01)
        newest = await wakeups.wait_for_cancels(["t2", "t10000"], 0.01)
        return kept, dropped, newest

    assert ({"t0"}, set(), {"t2", "t10000"}) == asyncio.run(main())


def test_close_wakes_every_waiter_at_once() -> None:
    async def main() -> tuple[bool, set[str], float]:
        wakeups = Wakeups(threading.Lock())
        work = asyncio.ensure_future(wakeups.wait_for_work(frozenset({"a"}), 3))
        cancels = asyncio.ensure_future(wakeups.wait_for_cancels(["t"], 3))
        await asyncio.sleep(0.01)
        started = time.monotonic()
        wakeups.close()
        woken, reported = await asyncio.gather(work, cancels)
        return woken, reported, time.monotonic() - started

    woken, reported, elapsed = asyncio.run(main())
    assert woken is True
    assert set() == reported
    assert elapsed < 2
