"""claim() and claim_next()."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class ClaimContract(ContractBase):
    """claim() and claim_next()."""
