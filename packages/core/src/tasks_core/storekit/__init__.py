"""The store kit: what every store — ours and third parties' — shares beyond the rules.

A store only fetches and writes; the decisions are here, once. :mod:`._claims` decides
``claim``/``claim_next`` (arguments, candidates, exclusive queues, order, the scan);
:mod:`._transitions` decides ``transition``/``transition_many`` items against loaded
tasks and plans the writes. docs/writing-a-store.md shows a store built on them.
"""

from tasks_core.storekit._claims import (
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
from tasks_core.storekit._transitions import (
    LoadedTask,
    TransitionPlan,
    plan_transitions,
    transition_result,
)

__all__ = [
    "ClaimOrder",
    "ClaimRequest",
    "ClaimScan",
    "LoadedTask",
    "Started",
    "TransitionPlan",
    "check_claim",
    "check_claim_next",
    "claim_one",
    "claim_order",
    "claim_result",
    "holds_queue",
    "is_candidate",
    "plan_transitions",
    "started",
    "transition_result",
]
