"""A worker's wait for work, cancelled: nothing it prepared is left un-awaited."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Sequence
from datetime import datetime

import pytest
from _runtime_kit import TIMEOUT, DelegatingStore, fast_worker, make_app
from tasks_core import ManualClock
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


class _StuckNextAvailable(DelegatingStore):
    """``next_available`` (what an idle worker asks before it waits) never answers: it
    says when it is asked, then waits until cancelled."""

    def __init__(self) -> None:
        super().__init__(MemoryStore(clock=ManualClock()))
        self.asked = asyncio.Event()

    async def next_available(self, queues: Sequence[str]) -> datetime | None:
        self.asked.set()
        await asyncio.Event().wait()  # until the worker's task is cancelled
        raise AssertionError("unreachable")


async def test_cancelling_run_while_the_idle_wait_asks_the_store_leaves_no_coroutine() -> None:
    """Cancelling ``Worker.run()`` while its wait for work asks the store for the next
    available instant MUST leave no coroutine un-awaited ("coroutine … was never awaited":
    the waits were made before that call, and a cancel there dropped them)."""
    store = _StuckNextAvailable()
    app = make_app(store=store)
    async with app:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            running = asyncio.ensure_future(fast_worker(app).run())
            await asyncio.wait_for(store.asked.wait(), TIMEOUT)
            running.cancel()
            await asyncio.wait([running])  # (raises nothing: no traceback keeps frames)
            assert running.cancelled()
            del running
            gc.collect()
    assert store.asked.is_set()
    assert [] == [str(w.message) for w in caught if "never awaited" in str(w.message)]
