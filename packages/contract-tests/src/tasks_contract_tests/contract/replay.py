"""Event ids: duplicate replays and reused ids."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class ReplayContract(ContractBase):
    """Event ids: duplicate replays and reused ids."""
