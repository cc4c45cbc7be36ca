"""Real concurrency: N writers, N claimers, N creators."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class RaceContract(ContractBase):
    """Real concurrency: N writers, N claimers, N creators."""
