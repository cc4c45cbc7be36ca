"""The aggregate ``StoreContract`` (imported lazily by the package)."""

from __future__ import annotations

from tasks_contract_tests.contract.batch import BatchContract
from tasks_contract_tests.contract.bulk import BulkContract
from tasks_contract_tests.contract.cancel_delivery import CancelDeliveryContract
from tasks_contract_tests.contract.capabilities import CapabilityContract
from tasks_contract_tests.contract.capacity import CapacityContract
from tasks_contract_tests.contract.claim_rules import ClaimRuleContract
from tasks_contract_tests.contract.claims import ClaimContract
from tasks_contract_tests.contract.clock import RealClockContract
from tasks_contract_tests.contract.corrupt import CorruptContract
from tasks_contract_tests.contract.counts import CountContract
from tasks_contract_tests.contract.create import CreateContract
from tasks_contract_tests.contract.delayed import DelayedContract
from tasks_contract_tests.contract.delete import DeleteContract
from tasks_contract_tests.contract.error_order import ErrorOrderContract
from tasks_contract_tests.contract.fixture import FixtureContract
from tasks_contract_tests.contract.held_claims import HeldClaimContract
from tasks_contract_tests.contract.inbox import InboxContract
from tasks_contract_tests.contract.leases import LeaseContract
from tasks_contract_tests.contract.limits import LimitContract
from tasks_contract_tests.contract.listing import ListingContract
from tasks_contract_tests.contract.model import ModelContract
from tasks_contract_tests.contract.priorities import PriorityContract
from tasks_contract_tests.contract.progress import ProgressContract
from tasks_contract_tests.contract.queue_limits import QueueLimitContract
from tasks_contract_tests.contract.queue_limits_many import ManyQueueLimitContract
from tasks_contract_tests.contract.races import RaceContract
from tasks_contract_tests.contract.replay import ReplayContract
from tasks_contract_tests.contract.retry import RetryContract
from tasks_contract_tests.contract.store_clock import StoreClockContract
from tasks_contract_tests.contract.tenants import TenantContract
from tasks_contract_tests.contract.transactions import TransactionContract
from tasks_contract_tests.contract.transition import TransitionContract
from tasks_contract_tests.contract.ttl import TTLContract
from tasks_contract_tests.contract.wakeups import WakeupContract
from tasks_contract_tests.contract.warm_races import WarmRaceContract
from tasks_contract_tests.contract.worker import WorkerContract

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


class StoreContract(
    WorkerContract,
    CancelDeliveryContract,
    ModelContract,
    RealClockContract,
    StoreClockContract,
    WarmRaceContract,
    WakeupContract,
    CapabilityContract,
    CorruptContract,
    DeleteContract,
    ErrorOrderContract,
    ProgressContract,
    ListingContract,
    InboxContract,
    CountContract,
    TTLContract,
    TenantContract,
    CapacityContract,
    RetryContract,
    LimitContract,
    LeaseContract,
    ClaimRuleContract,
    HeldClaimContract,
    PriorityContract,
    ManyQueueLimitContract,
    QueueLimitContract,
    DelayedContract,
    ClaimContract,
    BatchContract,
    BulkContract,
    TransactionContract,
    RaceContract,
    ReplayContract,
    TransitionContract,
    CreateContract,
    FixtureContract,
):
    """Every contract test. Override the ``store_factory`` fixture (and ``corrupt_task``).

    The bases are listed last group first: pytest runs inherited tests in reverse method
    resolution order, so the tests of the fixture itself (``FixtureContract``: fresh and
    isolated stores) run first and, with ``-x``, fail first when stores leak into each
    other; then creation, transitions… up to the worker.
    """
