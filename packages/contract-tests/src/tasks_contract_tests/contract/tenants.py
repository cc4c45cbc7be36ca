"""Tenant isolation and request authority."""

from __future__ import annotations

from tasks_contract_tests._base import ContractBase


class TenantContract(ContractBase):
    """Tenant isolation and request authority."""
