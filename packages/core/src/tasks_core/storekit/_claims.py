"""The claim decision: the checked arguments of ``claim``/``claim_next``, which tasks are
candidates, which keep an exclusive queue busy, the order claims are served in, and the
scan that turns ordered candidates into claims. A store fetches candidates in
:func:`claim_order` and writes what :class:`ClaimScan` decides, in one atomic step.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol

from tasks_core import reports
from tasks_core.arguments import (
    MAX_BATCH,
    check_lease_for,
    check_limit,
    check_queues,
    check_worker_id,
)
from tasks_core.errors import InvalidInput, Unavailable
from tasks_core.events import EventRecord
from tasks_core.models import Claim, Lease, Snapshot
from tasks_core.rules import available_at, check_claimable, is_claimable, present, start_claim

__all__ = [
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
        exclusive: the queues asked for that are exclusive (at most one live lease).
        limit: the most tasks to claim.
        start: how many of the claims start at once (``None``: all); the others are
            held ahead of a free slot (``ClaimInfo.held``: they read ``claimed``).
    """

    worker_id: str
    lease_for: float
    queues: frozenset[str]
    exclusive: frozenset[str]
    limit: int
    start: int | None = None


def check_claim(task_id: str, worker_id: str, lease_for: float) -> None:
    """Check the arguments of ``claim`` before anything is read.

    Raises:
        InvalidInput: a bad ``task_id``, ``worker_id`` or ``lease_for``.
    """
    check_lease_for(lease_for)
    check_worker_id(worker_id)
    if not isinstance(task_id, str):
        raise InvalidInput("task_id must be a string")


def check_claim_next(
    worker_id: str,
    lease_for: float,
    queues: Sequence[str],
    limit: int,
    exclusive: Collection[str],
    start: int | None = None,
) -> ClaimRequest:
    """Check the arguments of ``claim_next`` before anything is read.

    Raises:
        InvalidInput: a bad ``worker_id``, ``lease_for``, queue name, ``limit``
            (1..:data:`~tasks_core.arguments.MAX_BATCH`) or ``start`` (``None`` or an
            integer from 0).
    """
    check_lease_for(lease_for)
    check_worker_id(worker_id)
    wanted = check_queues(queues)
    exclusive_set = check_queues(exclusive, allow_empty=True)
    check_limit(limit, maximum=MAX_BATCH)
    if start is not None and (isinstance(start, bool) or not isinstance(start, int)
                              or start < 0):
        raise InvalidInput("start must be None or an integer of at least 0")
    return ClaimRequest(worker_id, lease_for, wanted, exclusive_set & wanted, limit, start)


def is_candidate(snapshot: Snapshot, now: datetime) -> bool:
    """Whether ``claim_next`` may take the task at ``now``: pending, not expired, no live
    lease, its available instant come (:func:`tasks_core.rules.is_claimable`)."""
    return is_claimable(snapshot, now)


def holds_queue(snapshot: Snapshot, now: datetime) -> bool:
    """Whether the task keeps its exclusive queue busy at ``now``: it holds a lease that
    has neither ended nor expired — whatever its status (a cancelled task's holder keeps
    the queue until it learns of the cancel)."""
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
    reports.delivery_limit(started.snapshot.id, started.failure)
    limit = started.snapshot.work.max_deliveries
    raise Unavailable(f"The task exceeded {limit} deliveries")


class ClaimScan:
    """One ``claim_next`` decided over candidates offered in :func:`claim_order`.

    ``busy`` are the exclusive queues asked for that a task already holds
    (:func:`holds_queue`). Offer candidates until :attr:`done`; each decision is
    returned to be written, and kept: :attr:`claims` in order, :attr:`failures` (tasks
    past their delivery limit, failed instead of served; call :meth:`report` once they
    are committed). A store that may lose a write to another claimer calls
    :meth:`withdraw` for it. ``candidate`` and ``start`` replace :func:`is_candidate`
    and :func:`tasks_core.rules.start_claim` (the contract suite's broken stores).
    """

    def __init__(
        self,
        request: ClaimRequest,
        now: datetime,
        busy: Iterable[str] = (),
        *,
        candidate: Candidate = is_candidate,
        start: StartClaim = start_claim,
    ) -> None:
        self.request = request
        self.now = now
        self._candidate = candidate
        self._start = start
        self._closed = set(busy) & request.exclusive
        self.claims: list[Claim] = []
        self.failures: list[Started] = []

    @property
    def remaining(self) -> int:
        """How many more tasks this call may claim."""
        return self.request.limit - len(self.claims)

    def open_queues(self) -> list[str]:
        """The queues that may still yield a claim, sorted: every queue asked for but
        the exclusive ones busy or already served by this call."""
        return sorted(self.request.queues - self._closed)

    def fetches(self) -> list[tuple[list[str], int]]:
        """What to fetch next as ``(queues, at most)`` groups, for a store that reads per
        group: the shared queues together, each open exclusive queue for one task."""
        shared = sorted(self.request.queues - self.request.exclusive)
        groups = [(shared, self.remaining)] if shared and self.remaining else []
        if self.remaining:
            groups += [([q], 1) for q in sorted(self.request.exclusive - self._closed)]
        return groups

    @property
    def done(self) -> bool:
        """Whether nothing more can be claimed by this call."""
        return self.remaining <= 0 or not self.open_queues()

    def close(self, queue: str) -> None:
        """An exclusive queue found busy meanwhile (e.g. inside the store's transaction)."""
        if queue in self.request.exclusive:
            self._closed.add(queue)

    def offer(self, snapshot: Snapshot) -> Started | None:
        """Decide the next candidate (in :func:`claim_order`): ``None`` to skip it (not a
        candidate at :attr:`now`, its queue closed, or nothing more to claim), else the
        claim or the failure to write."""
        queue = snapshot.queue
        if self.remaining <= 0 or queue not in self.request.queues or queue in self._closed:
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
        if queue in self.request.exclusive:
            self._closed.add(queue)
        return decided

    def withdraw(self, started: Started) -> None:
        """Forget a decision whose write was lost to another writer (its queue reopens)."""
        if started.claim is None:
            self.failures.remove(started)
            return
        self.claims.remove(started.claim)
        if started.snapshot.queue in self.request.exclusive:
            self._closed.discard(started.snapshot.queue)

    def report(self) -> None:
        """Report the tasks failed past their delivery limit; call once committed."""
        for started in self.failures:
            assert started.failure is not None
            reports.delivery_limit(started.snapshot.id, started.failure)
