"""What ``MemoryStore`` keeps: a :class:`Row` per task, :class:`OpenTasks`, the index
``claim_next`` reads instead of every task, and :class:`ClaimLog`, the claims of
rate-limited queues. All are used with the store lock held.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from tasks_core import rules
from tasks_core.models import Snapshot, TaskStatus, detached
from tasks_core.storekit import ClaimOrder, claim_order

__all__ = ["ClaimLog", "OpenTasks", "Row", "claimable_at"]


@dataclass
class Row:
    """One task as stored: the snapshot last written, the store's own (``models.detached``
    from every caller's copy: frozen, and no value in it a caller can reach), its history
    as JSON text and its lease token."""

    snapshot: Snapshot
    """The snapshot last written, kept whole even when :attr:`damaged`: what
    :meth:`counts_as_active` reads, as a database counts from columns beside a damaged
    document."""
    token: str | None = None
    history: list[str] = field(default_factory=list)
    """The applied events of the current run, as JSON text, oldest first."""
    event_ids: dict[str, int] = field(default_factory=dict)
    """The position in ``history`` of each applied event id."""
    damaged: bool = False
    """Whether the record reads as damaged (``Records._corrupt``, the contract suite's):
    every read of the snapshot is ``StoreCorrupt``, so no write reaches it (each reads
    first) until the task is replaced or deleted."""

    @classmethod
    def of(cls, snapshot: Snapshot) -> Row:
        """A new task's row, holding ``snapshot`` (detached from the caller's)."""
        return cls(detached(snapshot))

    def write(self, snapshot: Snapshot) -> None:
        """Hold ``snapshot`` (detached from the caller's) as the task's record."""
        self.snapshot = detached(snapshot)

    def counts_as_active(self, tenant: str, now: datetime) -> bool:
        """Whether the task counts toward ``tenant``'s ``max_active_tasks_per_scope`` at
        ``now``: ``rules.counts_as_active`` of the snapshot last written — damaged or not,
        as the SQL and MongoDB stores count from their tenant, status and expiry columns."""
        kept = self.snapshot
        return kept.tenant == tenant and rules.active_at(kept.status, kept.expires_at, now)


class _Place(NamedTuple):
    queue: str
    order: ClaimOrder
    ready: bool
    until: datetime | None
    """Held: when time alone makes the task claimable (``None``: only a write can)."""


class _Ready:
    """The ready tasks of one queue in claim order: a sorted list whose live part starts
    at ``start``. Claims take tasks from the front, so removing the first entry only
    moves ``start`` (the dead front is cut off once it is half the list): a claim costs
    the same whatever the backlog, where deleting the head of a list moves all of it."""

    __slots__ = ("entries", "start")

    def __init__(self) -> None:
        self.entries: list[ClaimOrder] = []
        self.start = 0

    def __len__(self) -> int:
        return len(self.entries) - self.start

    def add(self, order: ClaimOrder) -> None:
        bisect.insort(self.entries, order, lo=self.start)

    def remove(self, order: ClaimOrder) -> None:
        """Remove ``order``, which is present."""
        at = bisect.bisect_left(self.entries, order, lo=self.start)
        if at > self.start:
            del self.entries[at]
            return
        self.start += 1
        if self.start >= _DEAD_FRONT and 2 * self.start >= len(self.entries):
            del self.entries[:self.start]
            self.start = 0


_DEAD_FRONT = 1024
"""How many removed entries a :class:`_Ready` may keep at its front before cutting."""


class OpenTasks:
    """The tasks ``claim_next`` must know of — not finished, or holding a lease that has
    not ended (it may keep an exclusive queue busy) — each *ready* or *held*, as it was
    when last written (or last looked at by ``claim_next``):

    - ready: claimable. Kept per queue in claim order (``storekit.claim_order``), so that a
      claim reads the heads of its queues, not the tasks it cannot serve;
    - held: not claimable — leased, a retry not due yet, waiting for input, finished but
      still leased. Kept per queue as a set (an exclusive queue is busy while one of them
      holds a live lease) and, when time alone makes the task claimable (its lease
      expires, its retry falls due), in a heap by that instant, from which :meth:`wake`
      moves it back to ready.
    """

    def __init__(self) -> None:
        self._places: dict[str, _Place] = {}
        self._ready: dict[str, _Ready] = {}
        self._held: dict[str, dict[str, None]] = {}
        """The held task ids of each queue, an ordered set (read in the order they were
        held)."""
        self._due: list[tuple[datetime, str]] = []
        """A heap of ``(until, task id)`` of held tasks; an entry whose task is no longer
        held until that instant is stale: skipped, and dropped when the heap is rebuilt."""

    def add(self, snapshot: Snapshot) -> None:
        """Make the task of ``snapshot`` ready."""
        self._place(snapshot.id, _Place(snapshot.queue, claim_order(snapshot), True, None))

    def hold(self, snapshot: Snapshot, until: datetime | None) -> None:
        """Hold the task of ``snapshot`` ``until`` (see the class)."""
        self._place(snapshot.id, _Place(snapshot.queue, claim_order(snapshot), False, until))

    def set_aside(self, task_id: str) -> None:
        """Hold a ready task until its next write (its record is damaged)."""
        place = self._places[task_id]
        self._place(task_id, place._replace(ready=False, until=None))

    def discard(self, task_id: str) -> None:
        """Forget the task (finished and no longer leased, or deleted)."""
        place = self._places.pop(task_id, None)
        if place is None:
            return
        if place.ready:
            ready = self._ready[place.queue]
            ready.remove(place.order)
            if not ready:
                del self._ready[place.queue]
        else:
            held = self._held[place.queue]
            del held[task_id]
            if not held:
                del self._held[place.queue]

    def _place(self, task_id: str, place: _Place) -> None:
        if self._places.get(task_id) == place:
            return
        self.discard(task_id)
        self._places[task_id] = place
        if place.ready:
            self._ready.setdefault(place.queue, _Ready()).add(place.order)
            return
        self._held.setdefault(place.queue, {}).setdefault(task_id)  # an ordered set's add
        if place.until is not None:
            heapq.heappush(self._due, (place.until, task_id))
            if len(self._due) > 2 * len(self._places) + 1000:
                self._due = [(p.until, i) for i, p in self._places.items()
                             if not p.ready and p.until is not None]
                heapq.heapify(self._due)

    def wake(self, now: datetime) -> None:
        """Make ready the held tasks that time alone has made claimable by ``now``."""
        due = self._due
        while due and due[0][0] <= now:
            until, task_id = heapq.heappop(due)
            place = self._places.get(task_id)
            if place is not None and not place.ready and place.until == until:
                self._place(task_id, place._replace(ready=True, until=None))

    def __iter__(self) -> Iterator[str]:
        """Every open task id (valid until the next change)."""
        return iter(self._places)

    def held(self, queue: str) -> Collection[str]:
        """The held tasks of ``queue`` (valid until the next change)."""
        return self._held.get(queue, ())

    def in_order(
        self, queues: Collection[str], closed: Collection[str] = ()
    ) -> Iterator[ClaimOrder]:
        """The ready tasks of ``queues`` in claim order (the last item: the id), leaving out
        a queue as soon as it is in ``closed`` (which the caller may grow meanwhile). The
        index must not change while this runs."""
        heads = [(ready.entries[ready.start], queue, ready.start) for queue in queues
                 if (ready := self._ready.get(queue))]
        heapq.heapify(heads)
        while heads:
            entry, queue, position = heads[0]
            yield entry
            entries = self._ready[queue].entries
            position += 1
            if queue in closed or position == len(entries):
                heapq.heappop(heads)
            else:
                heapq.heapreplace(heads, (entries[position], queue, position))


def claimable_at(snapshot: Snapshot, now: datetime) -> datetime | None:
    """When ``snapshot``, not claimable at ``now``, turns claimable with no write: once its
    live lease has expired and its available instant has come (``None``: never — it is finished,
    expired or waiting for input; ``now``: look again at the next claim)."""
    if snapshot.terminal or snapshot.expired(now) or snapshot.status == TaskStatus.WAITING_INPUT:
        return None
    available = rules.available_at(snapshot)
    instants = [available] if available > now else []
    if snapshot.claim is not None and snapshot.lease_live(now):
        instants.append(snapshot.claim.expires_at)
    return max(instants, default=now)


class ClaimLog:
    """The claim instants of each rate-limited queue, oldest first, kept as long as the
    longest window any claimer asked for (``storekit.QueueLimits.rate``)."""

    def __init__(self) -> None:
        self._instants: dict[str, list[datetime]] = {}
        self._kept: dict[str, timedelta] = {}

    def count(self, queue: str, window: timedelta, now: datetime) -> int:
        """The claims of ``queue`` in the window of length ``window`` ending at ``now``
        (made after ``now - window``)."""
        instants = self._instants.get(queue, [])
        return len(instants) - bisect.bisect_right(instants, now - window)

    def add(self, queue: str, now: datetime, claims: int, window: timedelta) -> None:
        """Log ``claims`` claims of ``queue`` at ``now``; forget what no window reaches."""
        kept = self._kept[queue] = max(window, self._kept.get(queue, window))
        instants = self._instants.setdefault(queue, [])
        instants.extend([now] * claims)
        del instants[:bisect.bisect_right(instants, now - kept)]
