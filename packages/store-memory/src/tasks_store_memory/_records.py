"""The records of ``MemoryStore`` and how it reads and writes them (the lock held):
:class:`Records`, the base of the store, which adds the ``TaskStore`` operations.

Each row keeps the snapshot last written as an object of the store's own
(``models.detached`` from the caller's copy: frozen, its JSON values copied), and every
snapshot a call hands out is detached again (:meth:`Records._take`): a caller can never
change what is stored through a snapshot it gave or was given. The store's own decisions
read the kept snapshot itself (:meth:`Records._view`); a damaged record (the contract
suite's ``_corrupt``) reads as ``StoreCorrupt`` for its task only. The applied events are
kept as JSON text. The open tasks are indexed (:class:`~tasks_store_memory._rows.OpenTasks`)
so that ``claim_next`` reads the heads of its queues, and the small hooks at the end are
what the contract suite's deliberately broken stores override.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from datetime import datetime

from tasks_core import reports, rules, storekit
from tasks_core.clock import Clock, SystemClock
from tasks_core.errors import CapacityExceeded, StoreCorrupt, TaskNotFound
from tasks_core.events import EventRecord
from tasks_core.models import Lease, NewTask, Snapshot, StoreLimits, TaskStatus, detached

from tasks_store_memory._rows import ClaimLog, OpenTasks, Row, claimable_at

__all__ = ["Loaded", "Records"]

log = logging.getLogger("tasks_store_memory.store")


class Records:
    """The rows of the tasks, their index and the lock (see the module docstring)."""

    limits: StoreLimits

    def __init__(self, clock: Clock | None) -> None:
        self._clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._rows: dict[str, Row] = {}
        self._open = OpenTasks()
        """Tasks that may be claimable or hold a lease (see :meth:`_track`)."""
        self._claim_log = ClaimLog()
        """The claim instants of rate-limited queues."""

    @contextmanager
    def _locked(self) -> Iterator[datetime]:
        """Hold the store lock and yield ``now`` sampled after it is held."""
        with self._lock:
            yield rules.tick(self._clock.now())

    def _row(self, task_id: str) -> Row:
        row = self._rows.get(task_id)
        if row is None:
            raise TaskNotFound(task_id)
        return row

    @staticmethod
    def _record(doc: str) -> EventRecord:
        """An applied event as stored. Only the store writes these records and nothing
        damages one (``_corrupt`` damages the task's record, which every read of the
        history reads first)."""
        return EventRecord.model_validate_json(doc)

    def _view(self, task_id: str, row: Row) -> Snapshot:
        """The stored snapshot for the store's own decisions, read under the lock: never
        handed out, nor anything made from it unless that is written in the same step
        (a claim: :meth:`_set` keeps a detached copy, and the caller's shares values only
        with the snapshot it replaced). Anything else a call returns comes from
        :meth:`_take`.

        Raises:
            StoreCorrupt: the record is damaged.
        """
        if row.damaged:
            raise StoreCorrupt(task_id)
        return row.snapshot

    def _take(self, task_id: str, row: Row) -> Snapshot:
        """The stored snapshot, the caller's own (``models.detached``): a snapshot a call
        hands out, or the rules derive one from that it hands out.

        Raises:
            StoreCorrupt: the record is damaged.
        """
        return detached(self._view(task_id, row))

    def _set(self, row: Row, snapshot: Snapshot) -> None:
        """Store ``snapshot`` as the task's record (a copy detached from the caller's)."""
        row.write(snapshot)
        self._track(snapshot)

    def _add(self, snapshot: Snapshot) -> None:
        """Store a new task's ``snapshot`` in a row of its own (a replacement's too)."""
        self._rows[snapshot.id] = Row.of(snapshot)
        self._track(snapshot)

    def _append(self, row: Row, snapshot: Snapshot, record: EventRecord) -> None:
        self._set(row, snapshot)
        row.event_ids[record.event_id] = len(row.history)
        row.history.append(record.model_dump_json())

    def _visible(self, task_id: str, tenant: str | None, now: datetime) -> tuple[Row, Snapshot]:
        """The row and the caller's copy of a task a reader of ``tenant`` may see at
        ``now``. Another tenant's task is missing before anything of it is copied or
        checked for damage (its tenant is the row's, as a database's column would be).

        Raises:
            TaskNotFound: no such task, another tenant's, or expired.
            StoreCorrupt: the reader's tenant's record is damaged.
        """
        rules.check_tenant(tenant)
        row = self._row(task_id)
        if not self._tenant_matches(row.snapshot, tenant):
            raise TaskNotFound(task_id)
        snapshot = self._take(task_id, row)
        if self._expired(snapshot, now):
            raise TaskNotFound(task_id)
        return row, snapshot

    def _corrupt(self, task_id: str) -> None:
        """Damage the stored record of ``task_id`` (contract-suite support only): every
        read of its snapshot is ``StoreCorrupt`` (``Row.damaged``). What the row counts
        by (``Row.counts_as_active``) stays as last written, as a database's columns would.
        """
        with self._lock:
            self._row(task_id).damaged = True

    # -- the index of open tasks ---------------------------------------------------------

    def _track(self, snapshot: Snapshot) -> None:
        """Keep ``_open`` exact (see ``OpenTasks``) for ``snapshot``, just written: ready
        if claimable by the store clock, else held."""
        claim = snapshot.claim
        if snapshot.terminal and (claim is None or claim.ended):
            self._open.discard(snapshot.id)
            return
        now = rules.tick(self._clock.now())
        if self._claimable(snapshot, now):
            self._open.add(snapshot)
        else:
            self._open.hold(snapshot, claimable_at(snapshot, now))

    def _pick(
        self, queues: Collection[str], limit: int, room: Callable[[str], int], now: datetime
    ) -> list[tuple[str, Row]]:
        """Up to ``limit`` claimable tasks of ``queues`` in claim order, at most
        ``room(queue)`` of each. A ready task found not claimable after all (it expired,
        or its record is damaged) is held instead."""
        picked: list[tuple[str, Row]] = []
        taken: dict[str, int] = {}
        full: set[str] = set()
        unclaimable: list[tuple[str, Snapshot | None]] = []
        for *_, task_id in self._open.in_order(queues, full):
            if len(picked) >= limit:
                break
            row = self._rows[task_id]
            try:
                snapshot: Snapshot | None = self._view(task_id, row)
            except StoreCorrupt:
                snapshot = None
            if snapshot is None or not self._claimable(snapshot, now):
                unclaimable.append((task_id, snapshot))
                continue
            picked.append((task_id, row))
            taken[snapshot.queue] = taken.get(snapshot.queue, 0) + 1
            if taken[snapshot.queue] >= room(snapshot.queue):
                full.add(snapshot.queue)
        for task_id, snapshot in unclaimable:
            if snapshot is None:
                reports.corrupt_skipped(log, task_id, "claim_next")
                self._open.set_aside(task_id)
            else:
                self._track(snapshot)
        return picked

    def _next_available(self, queues: Collection[str], now: datetime) -> datetime | None:
        """The earliest available instant after ``now`` of a held task of ``queues`` that
        waits for it (pending, no live lease; a damaged record is left out)."""
        instants = []
        for queue in queues:
            for task_id in self._open.held(queue):
                try:
                    snapshot = self._view(task_id, self._rows[task_id])
                except StoreCorrupt:
                    continue
                available = rules.available_at(snapshot)
                if (available > now and snapshot.status == TaskStatus.PENDING
                        and not snapshot.lease_live(now)):
                    instants.append(available)
        return min(instants, default=None)

    def _queue_running(self, queue: str, now: datetime) -> int:
        """How many tasks of ``queue`` hold a live lease (``storekit.holds_queue``); a task
        with a live lease is never claimable, so it is held."""
        running = 0
        for task_id in self._open.held(queue):
            try:
                running += storekit.holds_queue(self._view(task_id, self._rows[task_id]), now)
            except StoreCorrupt:
                continue
        return running

    def _check_capacity(self, new: NewTask, now: datetime, replacing: bool) -> None:
        if not replacing and len(self._rows) >= self.limits.tasks_cap:
            raise CapacityExceeded("max_tasks")
        if len(self._rows) < self.limits.scope_cap:
            return  # fewer tasks in the store than the limit: no tenant can reach it
        # (a task being replaced is finished or expired, ``rules.check_replace``: not counted)
        if self._active_tasks(new.tenant, now) >= self.limits.scope_cap:
            raise CapacityExceeded("max_active_tasks_per_scope")

    def _active_tasks(self, tenant: str, now: datetime) -> int:
        """The active tasks of ``tenant``, counted up to ``max_active_tasks_per_scope``
        from what each row keeps beside its document (``Row.counts_as_active``): a damaged
        record counts as it was last written, never dropped from the count."""
        cap = self.limits.scope_cap
        active = 0
        for task_id in self._open:  # every task that is not terminal is open
            if self._rows[task_id].counts_as_active(tenant, now):
                active += 1
                if active >= cap:
                    break
        return active

    # -- hooks (the contract suite's broken stores override them) ------------------------

    def _tenant_matches(self, snapshot: Snapshot, tenant: str | None) -> bool:
        return tenant is None or snapshot.tenant == tenant

    def _expired(self, snapshot: Snapshot, now: datetime) -> bool:
        return snapshot.expired(now)

    def _find_event(self, row: Row, event_id: str) -> int | None:
        return row.event_ids.get(event_id)

    def _check_revision(self, snapshot: Snapshot, expected_revision: int, now: datetime) -> None:
        rules.check_revision(snapshot, expected_revision, now)

    def _claimable(self, snapshot: Snapshot, now: datetime) -> bool:
        """Whether ``claim_next`` may serve ``snapshot`` at ``now``."""
        return storekit.is_candidate(snapshot, now)

    def _start_claim(
        self, snapshot: Snapshot, worker_id: str, lease_for: float, now: datetime, *,
        held: bool = False,
    ) -> tuple[Snapshot, str, Lease | None, EventRecord | None]:
        """The claim of ``snapshot`` decided (``rules.start_claim``)."""
        return rules.start_claim(snapshot, worker_id, lease_for, now, held=held)

    def _lease_check(
        self,
        snapshot: Snapshot,
        token: str | None,
        lease: Lease,
        now: datetime,
        *,
        require_live: bool = True,
    ) -> None:
        rules.check_lease(snapshot, token, lease, now, require_live=require_live)


class Loaded:
    """A task of the store as ``storekit.plan_transitions`` reads and changes it (the
    store lock held)."""

    def __init__(self, store: Records, task_id: str, row: Row) -> None:
        self._store, self._id, self._row = store, task_id, row

    @property
    def token(self) -> str | None:
        return self._row.token

    @property
    def snapshot(self) -> Snapshot:
        return self._store._take(self._id, self._row)

    def earlier(self, event_id: str) -> Callable[[], EventRecord] | None:
        position = self._store._find_event(self._row, event_id)
        if position is None:
            return None
        return lambda: self._store._record(self._row.history[position])

    def update(self, snapshot: Snapshot, record: EventRecord) -> None:
        self._store._append(self._row, snapshot, record)
