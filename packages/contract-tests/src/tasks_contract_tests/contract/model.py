"""The store agrees with the reference model (Hypothesis)."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class ModelContract(ContractBase):
    """The store agrees with the reference model (Hypothesis)."""
