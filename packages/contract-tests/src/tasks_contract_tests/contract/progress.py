"""report_progress()."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class ProgressContract(ContractBase):
    """report_progress()."""
