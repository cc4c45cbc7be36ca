"""What a store declares about itself: its capabilities and its capacity limits.

Both are declared once, in code, and read by the runtime and the contract suite alike
(re-exported by :mod:`tasks_core.models`, where they were first defined).
"""

from __future__ import annotations

from pydantic import Field, StrictInt

from tasks_core._model import Model

__all__ = ["NO_LIMIT", "StoreCapabilities", "StoreLimits"]


class StoreCapabilities(Model):
    """What a store offers beyond the required contract; declared once, in code.

    Attributes:
        durable: data survives a process restart.
        multi_process: several processes may share the store safely.
        wakeups: ``wait_for_work`` returns early when work may be claimable.
        exclusive_queues: ``claim_next(..., exclusive=...)`` runs a queue one task at a time
            across every worker.
        batch_transitions: ``transition_many`` applies several transitions in one atomic
            step (group commit); the runtime then writes terminal events together.
        transactional_submit: ``create(new, *, replace=None, transaction=handle)`` writes
            inside the application's own open transaction (SQL: its ``AsyncConnection``),
            so the task exists if and only if that transaction commits.
        cancel_wakeups: ``wait_for_cancels`` reports a cancel committed by any process
            while it waits, so a worker stops a run (or drops a held claim) at once
            instead of at its next heartbeat.
        queue_limits: ``claim_next(..., limits={queue: QueueLimits(...)})`` keeps each
            queue's fleet-wide ``max_running`` and ``rate`` in the claim's atomic step.
        batch_create: ``create_many`` stores a batch of new tasks in one atomic step, all or
            nothing, capacity held for the batch as a whole (else the runtime loops).
        counts: ``counts(tenant=...)`` tells how many tasks read each status in each queue,
            exactly, from what the store keeps beside the documents (indexes), without
            reading every task (else a reader counts pages of ``list``).
    """

    durable: bool
    multi_process: bool
    wakeups: bool
    exclusive_queues: bool
    batch_transitions: bool = False
    transactional_submit: bool = False
    cancel_wakeups: bool = False
    queue_limits: bool = False
    batch_create: bool = False
    counts: bool = False


NO_LIMIT = 2**62
"""What an unset limit compares as: more tasks than any store holds (an SQL bigint)."""


class StoreLimits(Model):
    """Capacity limits enforced by the store inside the creating atomic step; each is off
    (``None``) unless set: opt-in protections, never a default refusal of ordinary work.

    Attributes:
        max_tasks: stored tasks of every status, finished ones kept for their retention
            included: protects the database's size.
        max_active_tasks_per_scope: live tasks (not finished, not expired) of one tenant:
            keeps one tenant's backlog from crowding out the others.
    """

    max_tasks: StrictInt | None = Field(default=None, ge=1, le=NO_LIMIT)
    max_active_tasks_per_scope: StrictInt | None = Field(default=None, ge=1, le=NO_LIMIT)

    @property
    def any_set(self) -> bool:
        """Whether either limit is set: a store then keeps count of its tasks."""
        return self.max_tasks is not None or self.max_active_tasks_per_scope is not None

    @property
    def tasks_cap(self) -> int:
        """``max_tasks``, or :data:`NO_LIMIT` when off (for comparisons and SQL)."""
        return NO_LIMIT if self.max_tasks is None else self.max_tasks

    @property
    def scope_cap(self) -> int:
        """``max_active_tasks_per_scope``, or :data:`NO_LIMIT` when off."""
        cap = self.max_active_tasks_per_scope
        return NO_LIMIT if cap is None else cap

    @classmethod
    def resolve(
        cls,
        limits: StoreLimits | None = None,
        *,
        max_tasks: int | None = None,
        max_active_tasks_per_scope: int | None = None,
    ) -> StoreLimits:
        """``limits`` (default: the defaults) with any limit given by keyword replaced: the
        way every store factory reads its ``max_tasks``/``max_active_tasks_per_scope``.

        Raises:
            InvalidInput: a limit that is not an ``int`` (a bool, a string) in
                ``1..NO_LIMIT``.
        """
        given = {"max_tasks": max_tasks, "max_active_tasks_per_scope": max_active_tasks_per_scope}
        base = (limits or cls()).model_dump()
        base.update({name: value for name, value in given.items() if value is not None})
        return cls(**base)
