"""Input requests and the inbox of accepted answers."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class InboxContract(ContractBase):
    """Input requests and the inbox of accepted answers."""
