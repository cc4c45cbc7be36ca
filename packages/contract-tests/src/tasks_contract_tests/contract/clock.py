"""The store's own clock path (small real-time group)."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class RealClockContract(ContractBase):
    """The store's own clock path (small real-time group)."""
