"""TTL, retention, hiding before reap, reap cascading."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class TTLContract(ContractBase):
    """TTL, retention, hiding before reap, reap cascading."""
