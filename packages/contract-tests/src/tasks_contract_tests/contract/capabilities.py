"""Capability flags: truthful and enforced."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class CapabilityContract(ContractBase):
    """Capability flags: truthful and enforced."""
