"""What a MongoStore can offer at most (private; see the matrix in ``store.py``)."""

from __future__ import annotations

from tasks_core.models import StoreCapabilities

__all__ = ["MAX_CAPABILITIES", "capabilities_for"]

MAX_CAPABILITIES = StoreCapabilities(
    durable=True, multi_process=True, wakeups=True, exclusive_queues=True,
    cancel_wakeups=True, batch_transitions=True, transactional_submit=True,
    batch_create=True, queue_limits=True, counts=True,
)
"""On a replica set or a sharded cluster (what ``StoreSpec.capabilities`` declares)."""


def capabilities_for(*, replica_set: bool) -> StoreCapabilities:
    """The capabilities on a deployment: change streams (wakeups, cancel wakeups) and
    multi-document transactions (batch transitions, batch creates, creates in the
    application's transaction) need a replica set or a sharded cluster; exclusive queues
    and queue limits are compare-and-sets of each queue's document on a standalone server
    (``_alone_limits``)."""
    if replica_set:
        return MAX_CAPABILITIES
    return StoreCapabilities(
        durable=True, multi_process=True, wakeups=False, exclusive_queues=True,
        queue_limits=True, counts=True,
    )
