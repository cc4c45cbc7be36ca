"""transition(): revision guards and every event kind."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class TransitionContract(ContractBase):
    """transition(): revision guards and every event kind."""
