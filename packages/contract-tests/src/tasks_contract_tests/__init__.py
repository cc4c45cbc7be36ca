"""tasks-contract-tests: the contract suite of tasks stores. A third party writes one file
(docs/writing-a-store.md has the whole story)::

    class TestAcmeStore(StoreContract):  # from tasks_contract_tests import StoreContract
        @pytest.fixture
        async def store_factory(self):
            async def factory(**options):  # a fresh, empty store per call, every option on
                return await open_acme("acme://tests", namespace=uuid4().hex, **options)
            return factory

``StoreContract`` aggregates every mixin below (a new test reaches every implementer on
upgrade); subclass a single mixin for a partial run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "BatchContract",
    "BulkContract",
    "CancelDeliveryContract",
    "CapabilityContract",
    "CapacityContract",
    "ClaimContract",
    "ClaimRuleContract",
    "CorruptContract",
    "CountContract",
    "CreateContract",
    "DelayedContract",
    "DeleteContract",
    "ErrorOrderContract",
    "FixtureContract",
    "HeldClaimContract",
    "InboxContract",
    "LeaseContract",
    "LimitContract",
    "ListingContract",
    "ManyQueueLimitContract",
    "ModelContract",
    "PriorityContract",
    "ProgressContract",
    "QueueLimitContract",
    "RaceContract",
    "RealClockContract",
    "ReplayContract",
    "RetryContract",
    "StoreClockContract",
    "StoreContract",
    "TTLContract",
    "TenantContract",
    "TransactionContract",
    "TransitionContract",
    "WakeupContract",
    "WarmRaceContract",
    "WorkerContract",
]

if TYPE_CHECKING:
    from tasks_contract_tests._suite import (
        BatchContract,
        BulkContract,
        CancelDeliveryContract,
        CapabilityContract,
        CapacityContract,
        ClaimContract,
        ClaimRuleContract,
        CorruptContract,
        CountContract,
        CreateContract,
        DelayedContract,
        DeleteContract,
        ErrorOrderContract,
        FixtureContract,
        HeldClaimContract,
        InboxContract,
        LeaseContract,
        LimitContract,
        ListingContract,
        ManyQueueLimitContract,
        ModelContract,
        PriorityContract,
        ProgressContract,
        QueueLimitContract,
        RaceContract,
        RealClockContract,
        ReplayContract,
        RetryContract,
        StoreClockContract,
        StoreContract,
        TenantContract,
        TransactionContract,
        TransitionContract,
        TTLContract,
        WakeupContract,
        WarmRaceContract,
        WorkerContract,
    )


def __getattr__(name: str) -> Any:
    """Import the suite lazily, so pytest can rewrite its asserts first."""
    if name not in __all__:
        raise AttributeError(name)
    import pytest

    pytest.register_assert_rewrite("tasks_contract_tests._suite", "tasks_contract_tests.contract")
    from tasks_contract_tests import _suite

    return getattr(_suite, name)
