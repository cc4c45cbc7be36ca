"""list(): filters and keyset paging."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class ListingContract(ContractBase):
    """list(): filters and keyset paging."""
