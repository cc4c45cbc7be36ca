"""Leases: generations, renew, release, worker_snapshot, expiry."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class LeaseContract(ContractBase):
    """Leases: generations, renew, release, worker_snapshot, expiry."""
