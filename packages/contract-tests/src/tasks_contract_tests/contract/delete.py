"""delete(): terminal tasks only."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class DeleteContract(ContractBase):
    """delete(): terminal tasks only."""
