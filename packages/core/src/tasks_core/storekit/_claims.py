"""The claim decision: the checked arguments of ``claim``/``claim_next``, which tasks are
candidates, which hold a place in a limited queue, the order claims are served in, and the
scan that turns ordered candidates into claims within each queue's room. A store fetches
candidates in :func:`claim_order` and writes what :class:`ClaimScan` decides, in one
atomic step.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol

from tasks_core import reports
from tasks_core.arguments import (
    MAX_BATCH,
    check_lease_for,
    check_queues,
    check_worker_id,
)
from tasks_core.errors import InvalidInput, Unavailable
from tasks_core.events import EventRecord
from tasks_core.models import Claim, Lease, Snapshot
from tasks_core.reasons import delivery_limit_message
from tasks_core.rules import available_at, check_claimable, is_claimable, present, start_claim
from tasks_core.sizes import check_limit
from tasks_core.storekit._limits import QueueLimits, QueueRoom

__all__ = [
    "EXCLUSIVE",
    "ClaimOrder",
    "ClaimRequest",
    "ClaimScan",
    "Started",
    "check_claim",
    "check_claim_next",
    "claim_one",
    "claim_order",
    "claim_result",
    "holds_queue",
    "is_candidate",
    "started",
]



class StartClaim(Protocol):
    """The signature of :func:`tasks_core.rules.start_claim` (replaced only by the
    contract suite's broken stores)."""

    def __call__(
        self, snapshot: Snapshot, worker_id: str, lease_for: float, now: datetime, *,
        held: bool = False,
    ) -> tuple[Snapshot, str, Lease | None, EventRecord | None]: ...


Candidate = Callable[[Snapshot, datetime], bool]
"""The signature of :func:`is_candidate` (likewise)."""


@dataclass(frozen=True)
class ClaimRequest:
    """The checked arguments of a ``claim_next`` call.

    Attributes:
        worker_id, lease_for: the claimer and its lease duration (seconds).
        queues: every queue asked for.
        limits: the fleet-wide limits of the queues asked for that have any — an
            ``exclusive`` queue is ``max_running=1`` (:class:`QueueLimits`).
        limit: the most tasks to claim.
        start: how many of the claims start at once (``None``: all); the others are
            held ahead of a free slot (``ClaimInfo.held``: they read ``claimed``).
    """

    worker_id: str
    lease_for: float
    queues: frozenset[str]
    limits: Mapping[str, QueueLimits]
    limit: int
    start: int | None = None

    @property
    def limited(self) -> frozenset[str]:
        """The queues asked for with limits: their claims are guarded (serialized with
        every other claimer of the queue) and counted in the claim's atomic step."""
        return frozenset(self.limits)


def check_claim(task_id: str, worker_id: str, lease_for: float) -> None:
    """Check the arguments of ``claim`` before anything is read.

    Raises:
        InvalidInput: a bad ``task_id``, ``worker_id`` or ``lease_for``.
    """
    check_lease_for(lease_for)
    check_worker_id(worker_id)
    if not isinstance(task_id, str):
        raise InvalidInput("task_id must be a string")


EXCLUSIVE = QueueLimits(max_running=1)
"""The limits of an ``exclusive`` queue."""


def check_claim_next(
    worker_id: str,
    lease_for: float,
    queues: Sequence[str],
    limit: int,
    exclusive: Collection[str],
    start: int | None = None,
    limits: Mapping[str, QueueLimits] | None = None,
) -> ClaimRequest:
    """Check the arguments of ``claim_next`` before anything is read; a queue both
    ``exclusive`` and in ``limits`` takes ``max_running=1`` with the rate of ``limits``.

    Raises:
        InvalidInput: a bad ``worker_id``, ``lease_for``, queue name, ``limit``
            (1..:data:`~tasks_core.arguments.MAX_BATCH`), ``start`` (``None`` or an
            integer from 0) or ``limits`` (a mapping of queue names to
            :class:`QueueLimits`).
    """
    check_lease_for(lease_for)
    check_worker_id(worker_id)
    wanted = check_queues(queues)
    exclusive_set = check_queues(exclusive, allow_empty=True)
    check_limit(limit, maximum=MAX_BATCH)
    if start is not None:
        check_limit(start, minimum=0, what="start (or None)")
    given = {} if limits is None else limits
    if not isinstance(given, Mapping) or not all(
            isinstance(value, QueueLimits) for value in given.values()):
        raise InvalidInput("limits must map queue names to QueueLimits")
    check_queues(list(given), allow_empty=True)
    kept: dict[str, QueueLimits] = {q: given[q] for q in sorted(wanted & set(given))}
    for queue in sorted(exclusive_set & wanted):
        rate = kept[queue].rate if queue in kept else None
        kept[queue] = EXCLUSIVE if rate is None else QueueLimits(max_running=1, rate=rate)
    return ClaimRequest(worker_id, lease_for, wanted, kept, limit, start)


def is_candidate(snapshot: Snapshot, now: datetime) -> bool:
    """Whether ``claim_next`` may take the task at ``now``: pending, not expired, no live
    lease, its available instant come (:func:`tasks_core.rules.is_claimable`)."""
    return is_claimable(snapshot, now)


def holds_queue(snapshot: Snapshot, now: datetime) -> bool:
    """Whether the task counts toward its queue's ``max_running`` at ``now`` (an exclusive
    queue is busy): it holds a lease that has neither ended nor expired — whatever its
    status (a cancelled task's holder keeps its place until it learns of the cancel)."""
    return snapshot.lease_live(now)


ClaimOrder = tuple[int, datetime, str]
"""A task's place in claim order (:func:`claim_order`); its last item is the task id."""


def claim_order(snapshot: Snapshot) -> ClaimOrder:
    """The order ``claim_next`` serves candidates in: the highest ``priority`` first, then
    the earliest available instant (:func:`tasks_core.rules.available_at`: a retry's
    ``retry_at``, a delayed task's ``run_at``, else its creation), then by id. A store's
    candidate query and index serve exactly this order."""
    return -snapshot.priority, available_at(snapshot), snapshot.id


class Started(NamedTuple):
    """A claim decided for one task: what to write, and what the caller gets.

    Attributes:
        snapshot: the task to store.
        token: the lease token to store (on a failure: ``None``, keep the stored one).
        claim: the claim handed to the worker; ``None`` when the task was failed instead.
        failure: past its delivery limit, the failure's history record (write it too).
    """

    snapshot: Snapshot
    token: str | None
    claim: Claim | None
    failure: EventRecord | None


def started(
    snapshot: Snapshot,
    worker_id: str,
    lease_for: float,
    now: datetime,
    *,
    start: StartClaim = start_claim,
    held: bool = False,
) -> Started:
    """The claim of a task already found claimable at ``now`` (or its failure past the
    delivery limit), decided by :func:`tasks_core.rules.start_claim`; ``held``: claimed
    ahead of a free slot."""
    new, token, lease, failure = start(snapshot, worker_id, lease_for, now, held=held)
    if failure is not None:
        return Started(new, None, None, failure)
    assert lease is not None
    return Started(new, token, Claim(present(new, now), lease), None)


def claim_one(
    snapshot: Snapshot,
    worker_id: str,
    lease_for: float,
    now: datetime,
    *,
    start: StartClaim = start_claim,
) -> Started:
    """``claim`` of the locked task at ``now``, decided (arguments checked by
    :func:`check_claim`). Write the outcome, then answer with :func:`claim_result`.

    Raises:
        Unavailable: terminal, expired, waiting for input, or under a live lease.
        Deferred: its available instant lies later than ``now``.
    """
    check_claimable(snapshot, now)
    return started(snapshot, worker_id, lease_for, now, start=start)


def claim_result(started: Started) -> Claim:
    """The answer of ``claim`` once ``started`` is written (committed).

    Raises:
        Unavailable: the task was failed past its delivery limit instead (reported once,
            here).
    """
    if started.claim is not None:
        return started.claim
    assert started.failure is not None
    reports.delivery_limit(started.snapshot.id, started.failure,
                           snapshot=started.snapshot)
    limit = started.snapshot.work.max_deliveries
    raise Unavailable(f"The task {delivery_limit_message(limit)}")


class ClaimScan:
    """One ``claim_next`` decided over candidates offered in :func:`claim_order`.

    A limited queue (:attr:`ClaimRequest.limits`) allows as many claims as its limits
    leave room for, from what the store counted in its atomic step: ``running``, the
    live leases of each (:func:`holds_queue`); ``recent``, the claims of each in its
    rate's window; ``busy``, those found full outright (an exclusive queue with a live
    lease). Offer candidates until :attr:`done`; each decision is returned to be
    written, and kept: :attr:`claims` in order, :attr:`failures` (tasks past their
    delivery limit, failed instead of served; call :meth:`report` once they are
    committed). A store that may lose a write to another claimer calls :meth:`withdraw`
    for it. ``candidate`` and ``start`` replace :func:`is_candidate` and
    :func:`tasks_core.rules.start_claim` (the contract suite's broken stores).
    """

    def __init__(
        self,
        request: ClaimRequest,
        now: datetime,
        busy: Iterable[str] = (),
        *,
        running: Mapping[str, int] | None = None,
        recent: Mapping[str, int] | None = None,
        candidate: Candidate = is_candidate,
        start: StartClaim = start_claim,
    ) -> None:
        self.request = request
        self.now = now
        self._candidate = candidate
        self._start = start
        self._room = QueueRoom(request.limits, running or {}, recent or {}, set(busy))
        self.claims: list[Claim] = []
        self.failures: list[Started] = []

    @property
    def remaining(self) -> int:
        """How many more tasks this call may claim."""
        return self.request.limit - len(self.claims)

    def room(self, queue: str) -> int:
        """How many more tasks of ``queue`` this call may claim."""
        left = self._room.left(queue)
        return self.remaining if left is None else min(left, self.remaining)

    def open_queues(self) -> list[str]:
        """The queues that may still yield a claim, sorted: every queue asked for but
        the limited ones without room."""
        return sorted(q for q in self.request.queues if self._room.left(q) != 0)

    def fetches(self) -> list[tuple[list[str], int]]:
        """What to fetch next as ``(queues, at most)`` groups, for a store that reads per
        group: the unlimited queues together, each limited queue with room for its room."""
        if not self.remaining:
            return []
        limited = self.request.limited
        shared = sorted(self.request.queues - limited)
        groups = [(shared, self.remaining)] if shared else []
        return groups + [([q], self.room(q)) for q in sorted(limited) if self.room(q) > 0]

    @property
    def done(self) -> bool:
        """Whether nothing more can be claimed by this call."""
        return self.remaining <= 0 or not self.open_queues()

    def close(self, queue: str) -> None:
        """A limited queue found full meanwhile (e.g. inside the store's transaction)."""
        while self._room.left(queue):
            self._room.take(queue)

    def offer(self, snapshot: Snapshot) -> Started | None:
        """Decide the next candidate (in :func:`claim_order`): ``None`` to skip it (not a
        candidate at :attr:`now`, its queue without room, or nothing more to claim), else
        the claim or the failure to write."""
        queue = snapshot.queue
        if queue not in self.request.queues or self.room(queue) <= 0:  # room: remaining too
            return None
        if not self._candidate(snapshot, self.now):
            return None
        ahead = self.request.start
        decided = started(snapshot, self.request.worker_id, self.request.lease_for, self.now,
                          start=self._start, held=ahead is not None and len(self.claims) >= ahead)
        if decided.claim is None:
            self.failures.append(decided)
            return decided
        self.claims.append(decided.claim)
        self._room.take(queue)
        return decided

    def withdraw(self, started: Started) -> None:
        """Forget a decision whose write was lost to another writer (its room returns)."""
        if started.claim is None:
            self.failures.remove(started)
            return
        self.claims.remove(started.claim)
        self._room.give_back(started.snapshot.queue)

    def claimed(self, queue: str) -> int:
        """How many claims of ``queue`` this call decided (a store with a rate log writes
        one entry per claim of a rate-limited queue)."""
        return sum(1 for claim in self.claims if claim.snapshot.queue == queue)

    def report(self) -> None:
        """Report the tasks failed past their delivery limit; call once committed."""
        for started in self.failures:
            assert started.failure is not None
            reports.delivery_limit(started.snapshot.id, started.failure,
                                   snapshot=started.snapshot)
