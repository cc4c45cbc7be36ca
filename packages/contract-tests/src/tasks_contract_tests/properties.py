"""The property runs of the suite, at budgets a database backend can afford.

Subclass :class:`PropertyChecks` and provide a ``store_factory`` fixture (as for
``StoreContract``) to run, against your store, the four Hypothesis properties the memory
store runs much deeper in tasks-core's own tests: the runtime model, hostile client
calls, forged leases and tenant isolation. Each run is small and derandomized, so a
backend on a real database stays in CI time::

    class TestAcmeProperties(PropertyChecks):
        @pytest.fixture
        def store_factory(self):
            return AcmeStore.open
"""

from __future__ import annotations

from tasks_contract_tests.bad_input import run_client_fuzz, run_lease_fuzz
from tasks_contract_tests.isolation import StoreFactory, run_isolation_check
from tasks_contract_tests.runtime_machine import run_runtime_model_check

__all__ = ["PropertyChecks"]


class PropertyChecks:
    """The runtime model, bad input, forged leases and isolation against
    ``store_factory`` (see the module docstring)."""

    def test_the_app_agrees_with_the_runtime_model(self, store_factory: StoreFactory) -> None:
        """An App on this store MUST show after every step of random programs (client
        calls, worker steps, crashes, clock moves) what the pure runtime model predicts."""
        run_runtime_model_check(store_factory, max_examples=6, steps=20)

    def test_client_calls_refuse_bad_input_and_write_nothing(
        self, store_factory: StoreFactory
    ) -> None:
        """Hostile arguments to every client call and CLI command MUST be refused with a
        named error of the tree (never a driver error) and leave the store unchanged; what
        is accepted MUST read back exactly."""
        run_client_fuzz(store_factory, max_examples=15, full_catalogue=False, sync_twin=False)

    def test_forged_leases_are_lost_and_change_nothing(self, store_factory: StoreFactory) -> None:
        """Leases with another token, task, generation or worker MUST get ``LeaseLost``
        from every lease operation and worker event, and change nothing."""
        run_lease_fuzz(store_factory, max_examples=30)

    def test_outsiders_learn_and_change_nothing(self, store_factory: StoreFactory) -> None:
        """Calls by other tenants and non-members MUST leave a tenant's tasks unchanged and
        answer about an existing task exactly as about a missing one."""
        run_isolation_check(store_factory, max_examples=25)
