"""Corrupt records cost only themselves."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class CorruptContract(ContractBase):
    """Corrupt records cost only themselves."""
