"""The store fixture yields an empty, isolated store, opened with the options it is given."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from tasks_core import CapacityExceeded, ManualClock, TaskQuery, TaskStore

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import SYSTEM, new_task


class FixtureContract(ContractBase):
    """The store fixture yields an empty, isolated store."""

    async def test_store_fixture_yields_an_empty_store(self, store: TaskStore) -> None:
        """The ``store_factory`` fixture MUST return a fresh, empty store.

        Troubleshooting: every contract test assumes it starts from nothing. If this fails,
        your factory reuses a database, schema or collection between tests: create a new
        namespace (table prefix, schema, database) per call, or truncate it.
        """
        assert [] == await store.list(TaskQuery(tenant=None, limit=1000))
        assert [] == await store.reap(1000)

    async def test_stores_from_the_factory_are_isolated(
        self, make_store: Callable[..., Awaitable[TaskStore]]
    ) -> None:
        """Two stores from the factory MUST NOT see each other's tasks.

        Troubleshooting: the factory must give each store its own namespace.
        """
        first = await make_store()
        second = await make_store()
        created = await first.create(new_task())
        assert [created.id] == [s.id for s in await first.list(TaskQuery(tenant=None))]
        assert [] == await second.list(TaskQuery(tenant=None))
        assert SYSTEM.tenant is None

    async def test_the_factory_passes_the_clock_and_the_limits_on(
        self, make_store: Callable[..., Awaitable[TaskStore]], clock: ManualClock
    ) -> None:
        """The ``store_factory`` fixture MUST pass ``clock``, ``max_tasks`` and
        ``max_active_tasks_per_scope`` on to the store it opens: the store reads the
        injected clock, and each limit of 1 refuses a second task.

        Troubleshooting: ``async def factory(**options): return await open_yours(url,
        **options)`` — every option, not a fixed few. A factory that drops one fails the
        clock and capacity tests for no fault of the store's (their hints then point at
        the store).
        """
        clock.advance(12345.678)
        for limit in ("max_tasks", "max_active_tasks_per_scope"):
            store = await make_store(**{limit: 1})
            assert clock.now() == await store.now(), "the factory dropped the clock"
            await store.create(new_task())
            with pytest.raises(CapacityExceeded) as caught:
                await store.create(new_task())
            assert limit == caught.value.limit, f"the factory dropped {limit}"
