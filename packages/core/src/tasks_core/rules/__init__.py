"""The task state machine as pure functions: no I/O, no clock, no randomness but tokens.

Every store performs each operation as: lock/load the record, take ``now`` from its clock
(after the lock is held), call these functions, and write the result back in the same
atomic step. Keeping the semantics here means no two backends can disagree on them; the
contract suite still proves that each backend applies them atomically. The claim decision
built on these rules, for store authors, is :mod:`tasks_core.storekit`.
"""

from tasks_core.arguments import (
    MAX_BATCH,
    MAX_LEASE_S,
    BatchItem,
    check_batch,
    check_lease_for,
    check_queues,
    check_tenant,
    check_worker_id,
)
from tasks_core.rules._access import Right, authorize_event, can_see, check_lease, check_request
from tasks_core.rules._events import (
    Decision,
    apply_event,
    check_replay,
    check_revision,
    decide_transition,
    next_commit_time,
)
from tasks_core.rules._leases import (
    DELIVERY_LIMIT_ERROR,
    DELIVERY_LIMIT_EVENT_ID,
    check_claimable,
    is_claimable,
    new_lease_token,
    new_lease_tokens,
    release,
    renew,
    report_progress,
    start_claim,
)
from tasks_core.rules._snapshots import (
    HELD_PAST_TTL,
    active_at,
    available_at,
    check_replace,
    counts_as_active,
    gone,
    matches,
    new_snapshot,
    present,
    tick,
    ttl_end,
)
from tasks_core.sizes import check_limit

__all__ = [
    "DELIVERY_LIMIT_ERROR",
    "DELIVERY_LIMIT_EVENT_ID",
    "HELD_PAST_TTL",
    "MAX_BATCH",
    "MAX_LEASE_S",
    "BatchItem",
    "Decision",
    "Right",
    "active_at",
    "apply_event",
    "authorize_event",
    "available_at",
    "can_see",
    "check_batch",
    "check_claimable",
    "check_lease",
    "check_lease_for",
    "check_limit",
    "check_queues",
    "check_replace",
    "check_replay",
    "check_request",
    "check_revision",
    "check_tenant",
    "check_worker_id",
    "counts_as_active",
    "decide_transition",
    "gone",
    "is_claimable",
    "matches",
    "new_lease_token",
    "new_lease_tokens",
    "new_snapshot",
    "next_commit_time",
    "present",
    "release",
    "renew",
    "report_progress",
    "start_claim",
    "tick",
    "ttl_end",
]
