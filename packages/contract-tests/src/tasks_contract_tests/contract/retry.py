"""Retry deadlines and the delivery limit."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class RetryContract(ContractBase):
    """Retry deadlines and the delivery limit."""
