"""create(): atomic first snapshot, TaskExists, replace."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class CreateContract(ContractBase):
    """create(): atomic first snapshot, TaskExists, replace."""
