"""max_tasks and max_active_tasks_per_scope."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class CapacityContract(ContractBase):
    """max_tasks and max_active_tasks_per_scope."""
