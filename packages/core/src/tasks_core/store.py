"""The ``TaskStore`` protocol: the written contract every backend implements.

A store holds data and the atomic operations on it — nothing that runs (no tasks, timers
or queues of its own). Driver types never cross this boundary: stores take and return
core models and raise the core errors (``StoreUnavailable`` for transient driver
failures, ``StoreCorrupt`` for a record that fails validation). The semantics of each
operation are the pure functions of :mod:`tasks_core.rules` and the decisions of
:mod:`tasks_core.storekit`; a store's job is to apply them atomically. Its MUST rules, each
with the contract test that proves it, are in docs/contract.md ("The store protocol's
rules"); each method's docstring states its own.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from tasks_core.authority import Access
from tasks_core.errors import TasksError
from tasks_core.events import Event, EventRecord, Transition
from tasks_core.models import (
    Claim,
    Lease,
    NewTask,
    Snapshot,
    StoreCapabilities,
    TaskQuery,
    TaskStatus,
)
from tasks_core.storekit import QueueLimits

__all__ = ["TaskStore"]


@runtime_checkable
class TaskStore(Protocol):
    """An async task store. See the module docstring for the rules."""

    @property
    def capabilities(self) -> StoreCapabilities:
        """What this store offers beyond the required contract (frozen)."""
        ...

    async def now(self) -> datetime:
        """The store's authoritative clock (aware UTC, whole milliseconds).

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        ...

    async def create(
        self, new: NewTask, *, replace: Snapshot | None = None, transaction: Any = None
    ) -> Snapshot:
        """Store a new task at revision 0, atomically with the capacity checks.

        Args:
            new: the task.
            replace: the current snapshot of a finished (or expired) task with the same id,
                to be replaced by a new run in the same atomic step.
            transaction: the application's own open transaction to write in (capability
                ``transactional_submit``; its type is the store's: an ``AsyncConnection``
                on SQL), so the task exists if and only if that transaction commits.

        Raises:
            TaskExists: the id is taken (and ``replace`` is not given).
            RevisionConflict: ``replace`` is not the current run and revision.
            Unavailable: ``replace`` names a task that is still live.
            TaskNotFound: ``replace`` is given but no task has that id.
            CapacityExceeded: ``max_tasks`` or ``max_active_tasks_per_scope``; nothing stored.
            CapabilityNotSupported: ``transaction`` given to a store without
                ``transactional_submit``; nothing stored.
            StoreUnavailable: transient failure; nothing stored.
        """
        ...

    async def create_many(
        self, news: Sequence[NewTask], *, transaction: Any = None
    ) -> builtins.list[Snapshot]:
        """Store new tasks at revision 0 in one atomic step, all or nothing (capability
        ``batch_create``), as ``storekit.check_create_many`` and ``check_batch_room``
        decide: every task at the same instant, the capacity limits held for the batch as
        a whole. No replacements: a taken id refuses the batch.

        Returns:
            The snapshots created, in the order of ``news`` (an empty batch: ``[]``).

        Raises:
            CapabilityNotSupported: the store has no ``batch_create`` (or ``transaction``
                given without ``transactional_submit``); nothing stored.
            InvalidInput: not a sequence of ``NewTask``, more than 1000, or an id twice.
            TaskExists: an id is taken (the first in order); nothing stored.
            CapacityExceeded: the batch would pass ``max_tasks`` or a tenant's
                ``max_active_tasks_per_scope``; nothing stored.
            StoreUnavailable: transient failure; nothing stored.
        """
        ...

    async def get(self, task_id: str, *, tenant: str | None) -> Snapshot:
        """The current snapshot. ``tenant=None`` looks in every tenant.

        Raises:
            InvalidInput: ``tenant`` is neither a string nor ``None`` (before any read).
            TaskNotFound: unknown, in another tenant, or expired.
            StoreCorrupt: the record fails validation.
            StoreUnavailable: transient failure.
        """
        ...

    async def list(self, query: TaskQuery) -> builtins.list[Snapshot]:
        """Tasks matching ``query``, ordered by id, after ``query.after``, at most
        ``query.limit``; expired and corrupt records are left out.

        Raises:
            StoreUnavailable: transient failure.
        """
        ...

    async def counts(
        self, *, tenant: str | None
    ) -> builtins.dict[tuple[str, TaskStatus], int]:
        """How many tasks of ``tenant`` (``None``: every tenant) read each status in each
        queue at the store's ``now`` (capability ``counts``): the task ``list`` returns
        for that tenant, queue and one status, counted — expired tasks left out, the
        statuses as ``rules.present`` derives them (``running``, ``claimed``,
        ``scheduled``) — read in one consistent step. A pair without a task is absent.
        A record whose document fails validation (``list`` leaves it out) may count as
        its stored queue and status say: counts read what is kept beside the documents.

        Raises:
            CapabilityNotSupported: the store has no ``counts``.
            InvalidInput: ``tenant`` is neither a string nor ``None``.
            StoreUnavailable: transient failure.
        """
        ...

    async def history(self, task_id: str, *, tenant: str | None) -> builtins.list[EventRecord]:
        """The applied events of the current run, in order.

        Raises:
            InvalidInput: as for :meth:`get`.
            TaskNotFound: as for :meth:`get`.
            StoreCorrupt: the record fails validation.
            StoreUnavailable: transient failure.
        """
        ...

    async def transition(
        self,
        task_id: str,
        expected_revision: int,
        event: Event,
        authority: Lease | Access,
    ) -> Transition:
        """Apply ``event`` atomically: the five steps of rule 3 in docs/contract.md —
        find, authorize, replay, revision check, apply — as ``storekit.plan_transitions``
        decides them (``rules.decide_transition``).

        Raises:
            TypeError: ``authority`` is neither a ``Lease`` nor an ``Access`` (before any
                read).
            TaskNotFound: unknown; for request access also another tenant, invisible or
                expired (a lease ignores tenant and TTL).
            LeaseLost: the lease is not the exact live lease.
            AuthorizationError: wrong kind of authority, or a missing right.
            EventIdReused: this event id was applied with different content.
            RevisionConflict: ``expected_revision`` is not current.
            InvalidInput: the event is not valid for this task.
            StoreCorrupt, StoreUnavailable: as for :meth:`get`.
        """
        ...

    async def transition_many(
        self, items: Sequence[tuple[str, int, Event, Lease | Access]]
    ) -> builtins.list[Transition | TasksError]:
        """Apply several transitions ``(task_id, expected_revision, event, authority)`` in
        one atomic step (capability ``batch_transitions``; rule 9).

        Each item is decided exactly as :meth:`transition` would decide it, in order (a
        later item on the same task sees the earlier one applied). An item's refusal is
        returned in its place and writes nothing of that item; the other items still
        apply. A failure of the whole step (``StoreUnavailable``) raises and writes
        nothing: every item may simply be sent again (event ids make that safe).

        Returns:
            One ``Transition`` or refusal (a ``TasksError``) per item, in order.

        Raises:
            CapabilityNotSupported: the store has no ``batch_transitions``.
            TypeError: an item is not a ``(str, int, Event, Lease | Access)`` tuple.
            InvalidInput: more than 1000 items.
            StoreUnavailable: transient failure; nothing written.
        """
        ...

    async def claim(self, task_id: str, worker_id: str, lease_for: float) -> Claim:
        """Claim exactly this task for ``lease_for`` seconds.

        Raises:
            TaskNotFound: unknown task.
            Unavailable: terminal, expired, waiting for input, under a live lease — or
                just failed for exceeding ``work.max_deliveries``.
            Deferred: its available instant (a retry's ``retry_at``, a delayed task's
                ``run_at``) lies later (``.seconds`` until due).
            InvalidInput: bad ``lease_for``.
            StoreCorrupt, StoreUnavailable: as for :meth:`get`.
        """
        ...

    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
        start: int | None = None,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> builtins.list[Claim]:
        """Claim up to ``limit`` claimable tasks of ``queues`` in claim order
        (``storekit.claim_order``), as ``storekit.ClaimScan`` decides.

        Never blocks on another claimer. Tasks past their delivery limit are failed, not
        returned. A queue in ``limits`` (``storekit.QueueLimits``) never has more live
        leases than its ``max_running``, nor more claims than its ``rate`` allows in any
        window, counted in the claim's atomic step; a queue in ``exclusive`` is
        ``max_running=1``. Claims past the first ``start`` (``None``: all start) are held
        ahead of a free slot: they read ``claimed`` until renewed.

        Raises:
            CapabilityNotSupported: ``exclusive`` given without ``exclusive_queues``,
                ``limits`` without ``queue_limits``.
            InvalidInput: bad ``lease_for``, ``limit``, ``start``, ``limits`` or queue
                names.
            StoreUnavailable: transient failure.
        """
        ...

    async def next_available(self, queues: Sequence[str]) -> datetime | None:
        """The earliest available instant (``rules.available_at``) later than the store's
        ``now`` of a task of ``queues`` that waits for it — pending, no live lease, a
        delayed task or a retry — or ``None`` when no task waits. A worker with nothing
        to claim sleeps until then (at most its poll interval), not a fixed poll.

        Raises:
            InvalidInput: bad queue names.
            StoreUnavailable: transient failure.
        """
        ...

    async def renew(self, lease: Lease, lease_for: float) -> Claim:
        """Extend a live lease (a held claim is held no more); the old lease becomes stale.
        Returns the current snapshot (so the worker learns of a cancel) and the new lease.

        Raises:
            LeaseLost: not the exact live lease.
            InvalidInput: bad ``lease_for``.
            StoreCorrupt, StoreUnavailable: as for :meth:`get`.
        """
        ...

    async def report_progress(self, lease: Lease, value: float, message: str | None) -> Snapshot:
        """Record progress 0–100 for the lease holder (not revisioned).

        Raises:
            LeaseLost: not the exact live lease.
            InvalidInput: ``value`` outside 0..100.
            StoreCorrupt, StoreUnavailable: as for :meth:`get`.
        """
        ...

    async def release(self, lease: Lease) -> Snapshot:
        """Return the task to claimable at once. Consumes no retry; the delivery stays
        counted. An expired (but otherwise exact) lease may still release.

        Raises:
            LeaseLost: not the exact lease.
            StoreCorrupt, StoreUnavailable: as for :meth:`get`.
        """
        ...

    async def worker_snapshot(self, lease: Lease) -> Snapshot:
        """The snapshot for the lease holder (ignores tenant and TTL).

        Raises:
            LeaseLost: not the exact live lease.
            StoreCorrupt, StoreUnavailable: as for :meth:`get`.
        """
        ...

    async def delete(self, task_id: str, *, expected_revision: int) -> None:
        """Admin: remove a terminal task with its history (frees a squatted key), in any
        tenant, expired or not. The refusals come in this order.

        Raises:
            TaskNotFound: unknown task.
            StoreCorrupt: the record fails validation.
            RevisionConflict: ``expected_revision`` is not current
                (``rules.check_revision``).
            Unavailable: the task is not terminal (``TaskStatus.terminal``).
            StoreUnavailable: transient failure.
        """
        ...

    async def reap(self, limit: int = 1000) -> builtins.list[str]:
        """Delete up to ``limit`` expired tasks (``expires_at <= now``) that no run holds a
        live lease on (``rules.gone``), with their history and inbox; return their ids. A
        corrupt record is skipped and reported (``reports.corrupt_skipped``), not fatal.

        Raises:
            InvalidInput: ``limit`` is not an integer >= 1 (``rules.check_limit(limit)``,
                before anything is read).
            StoreUnavailable: transient failure.
        """
        ...

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """Wait until work may be claimable on ``queues`` (created, released, answered,
        retry scheduled) or ``timeout`` seconds pass; ``True`` when woken early.

        Raises:
            CapabilityNotSupported: the store has no ``wakeups``.
        """
        ...

    async def wait_for_cancels(
        self, task_ids: Collection[str], timeout: float
    ) -> builtins.set[str]:
        """Wait until a task of ``task_ids`` is cancelled, by any process, or ``timeout``
        seconds pass; the ids found cancelled (empty on timeout).

        ``task_ids`` is read whenever a cancel arrives, so the caller may add ids to it
        while waiting (``test_wait_for_cancels_reads_ids_added_while_waiting``). A cancel
        committed while the call waits MUST be reported before the timeout
        (``test_wait_for_cancels_reports_a_cancel_while_waiting``); one committed after
        the store's first ``wait_for_cancels`` but before this call began MUST be
        reported by this call, at once
        (``test_wait_for_cancels_reports_a_cancel_made_between_waits``). An id may be
        reported more than once (the caller reads the task and stops watching it), never
        one that was not cancelled
        (``test_wait_for_cancels_reports_only_cancels_of_watched_tasks``).

        Raises:
            CapabilityNotSupported: the store has no ``cancel_wakeups``.
            InvalidInput: ``timeout`` is not a finite number of seconds >= 0.
            StoreUnavailable: transient failure.
        """
        ...

    async def aclose(self) -> None:
        """Release what the store created (never what the application passed in)."""
        ...
