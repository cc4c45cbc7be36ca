"""The fixtures every contract mixin relies on. Implementers override ``store_factory``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from tasks_core import ManualClock, TaskStore
from tasks_core.plugins import BeginTransaction

StoreFactory = Callable[..., Awaitable[TaskStore]]
Corrupter = Callable[[TaskStore, str], Awaitable[None]]


class ContractBase:
    """Fixtures shared by every mixin.

    Override in your test class:

    - ``store_factory`` (required): an async fixture returning ``async factory(**options)``
      that opens a fresh, empty store. It must forward ``clock``, ``max_tasks`` and
      ``max_active_tasks_per_scope`` to the store.
    - ``corrupt_task`` (optional): returns ``async corrupt(store, task_id)`` damaging the
      persisted record; without it the corrupt-record tests fail with a reminder.
    - ``begin_transaction`` (a store with ``transactional_submit``): returns ``async
      begin(store, started)``, an application transaction of the store's kind
      (``tasks_core.plugins.BeginTransaction``); without it those tests fail with a
      reminder.
    """

    pytestmark = [pytest.mark.anyio]

    @pytest.fixture
    def anyio_backend(self) -> str:
        """Stores are asyncio libraries."""
        return "asyncio"

    @pytest.fixture
    async def store_factory(self) -> StoreFactory:
        """Override me: return ``async factory(**options) -> fresh, empty store``."""
        pytest.fail("Override the `store_factory` fixture in your StoreContract subclass")

    @pytest.fixture
    def corrupt_task(self) -> Corrupter | None:
        """Override me: return ``async corrupt(store, task_id)`` (test support only)."""
        return None

    @pytest.fixture
    def begin_transaction(self) -> BeginTransaction | None:
        """Override me (``transactional_submit``): return ``async begin(store, started)``
        (test support only)."""
        return None

    @pytest.fixture
    def clock(self) -> ManualClock:
        """The injected store clock; tests move it with ``clock.advance(seconds)``."""
        return ManualClock()

    @pytest.fixture
    async def make_store(
        self, store_factory: StoreFactory, clock: ManualClock
    ) -> AsyncIterator[Callable[..., Awaitable[TaskStore]]]:
        """``await make_store(**limits)``: a fresh store on the injected clock (pass
        ``clock=None`` for the store's own clock). Closed after the test."""
        opened: list[TaskStore] = []

        async def make(**options: Any) -> TaskStore:
            options.setdefault("clock", clock)
            if options["clock"] is None:
                del options["clock"]
            store = await store_factory(**options)
            opened.append(store)
            return store

        yield make
        for store in reversed(opened):
            await store.aclose()

    @pytest.fixture
    async def store(self, make_store: Callable[..., Awaitable[TaskStore]]) -> TaskStore:
        """A fresh, empty store with default limits on the injected clock."""
        return await make_store()
