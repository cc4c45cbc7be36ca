"""The property runs of the suite, at budgets a database backend can afford.

Subclass :class:`PropertyChecks` beside ``StoreContract`` with the same ``store_factory``
fixture (async or not) to run, against your store, the four Hypothesis properties the
memory store runs much deeper in tasks-core's own tests: the runtime model, hostile client
calls, forged leases and tenant isolation. Each run is small and derandomized, so a
backend on a real database stays in CI time; each runs in a thread of its own, whose
examples open their own event loops (docs/writing-a-store.md shows the file).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import anyio
import pytest

from tasks_contract_tests.bad_input import run_client_fuzz, run_lease_fuzz
from tasks_contract_tests.isolation import StoreFactory, run_isolation_check
from tasks_contract_tests.runtime_machine import run_runtime_model_check

__all__ = ["PropertyChecks"]


async def _in_a_thread(check: Callable[[], None]) -> None:
    """Run a property check (which runs its own event loops) off the test's loop."""
    await anyio.to_thread.run_sync(check)


class PropertyChecks:
    """The runtime model, bad input, forged leases and isolation against
    ``store_factory`` (see the module docstring)."""

    pytestmark = [pytest.mark.anyio]

    @pytest.fixture
    def anyio_backend(self) -> str:
        """Stores are asyncio libraries."""
        return "asyncio"

    async def test_the_app_agrees_with_the_runtime_model(
        self, store_factory: StoreFactory
    ) -> None:
        """An App on this store MUST show after every step of random programs (client
        calls, worker steps, crashes, clock moves) what the pure runtime model predicts."""
        await _in_a_thread(functools.partial(
            run_runtime_model_check, store_factory, max_examples=6, steps=20))

    async def test_client_calls_refuse_bad_input_and_write_nothing(
        self, store_factory: StoreFactory
    ) -> None:
        """Hostile arguments to every client call and CLI command MUST be refused with a
        named error of the tree (never a driver error) and leave the store unchanged; what
        is accepted MUST read back exactly."""
        await _in_a_thread(functools.partial(
            run_client_fuzz, store_factory, max_examples=15, full_catalogue=False,
            sync_twin=False))

    async def test_forged_leases_are_lost_and_change_nothing(
        self, store_factory: StoreFactory
    ) -> None:
        """Leases with another token, task, generation or worker MUST get ``LeaseLost``
        from every lease operation and worker event, and change nothing."""
        await _in_a_thread(functools.partial(run_lease_fuzz, store_factory, max_examples=30))

    async def test_outsiders_learn_and_change_nothing(self, store_factory: StoreFactory) -> None:
        """Calls by other tenants and non-members MUST leave a tenant's tasks unchanged and
        answer about an existing task exactly as about a missing one."""
        await _in_a_thread(functools.partial(
            run_isolation_check, store_factory, max_examples=25))
