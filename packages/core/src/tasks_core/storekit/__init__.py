"""The store kit: what every store — ours and third parties' — shares beyond the rules.

A store only fetches and writes; the decisions are here, once. :mod:`._claims` decides
``claim``/``claim_next`` (arguments, candidates, order, the scan); :mod:`._limits` the
fleet-wide queue limits and a call's room in them; :mod:`._creates` decides
``create_many`` (a batch's ids and room); :mod:`._transitions` decides
``transition``/``transition_many`` items against loaded tasks and plans the writes.
docs/writing-a-store.md shows a store built on them.
"""

from tasks_core.storekit._claims import (
    EXCLUSIVE,
    ClaimOrder,
    ClaimRequest,
    ClaimScan,
    Started,
    check_claim,
    check_claim_next,
    claim_one,
    claim_order,
    claim_result,
    holds_queue,
    is_candidate,
    started,
)
from tasks_core.storekit._creates import (
    MAX_BATCH,
    check_batch_room,
    check_create_many,
    check_stored_room,
    new_snapshots,
    refuse_taken,
    tenant_counts,
)
from tasks_core.storekit._limits import MAX_RUNNING, QueueLimits, QueueRoom
from tasks_core.storekit._transitions import (
    LoadedTask,
    TransitionPlan,
    plan_transitions,
    transition_result,
)

__all__ = [
    "EXCLUSIVE",
    "MAX_BATCH",
    "MAX_RUNNING",
    "ClaimOrder",
    "ClaimRequest",
    "ClaimScan",
    "LoadedTask",
    "QueueLimits",
    "QueueRoom",
    "Started",
    "TransitionPlan",
    "check_batch_room",
    "check_claim",
    "check_claim_next",
    "check_create_many",
    "check_stored_room",
    "claim_one",
    "claim_order",
    "claim_result",
    "holds_queue",
    "is_candidate",
    "new_snapshots",
    "plan_transitions",
    "refuse_taken",
    "started",
    "tenant_counts",
    "transition_result",
]
