"""The task state machine as pure functions: no I/O, no clock, no randomness but tokens.

Every store performs each operation as: lock/load the record, take ``now`` from its clock
(after the lock is held), call these functions, and write the result back in the same
atomic step. Keeping the semantics here means no two backends can disagree on them; the
contract suite still proves that each backend applies them atomically.

Stored snapshots carry ``pending`` rather than ``running``; :func:`present` derives
``running`` (a non-terminal, non-waiting task with a live lease) for the reader.

All store instants are whole milliseconds (:func:`tick`) so every backend — MongoDB
included — reads back exactly what it wrote.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from tasks_core._model import built, replaced
from tasks_core.authority import Access, Owner, System, check_name
from tasks_core.clock import utc
from tasks_core.durations import check_duration
from tasks_core.errors import (
    AuthorizationError,
    Deferred,
    EventIdReused,
    InvalidInput,
    LeaseLost,
    RevisionConflict,
    TaskNotFound,
    Unavailable,
)
from tasks_core.events import (
    LEASE_EVENTS,
    Cancelled,
    Completed,
    Event,
    EventRecord,
    Failed,
    InputRequested,
    InputResponsesAccepted,
    RetryRequested,
    Transition,
    WatcherAdded,
)
from tasks_core.models import (
    ClaimInfo,
    ErrorInfo,
    Lease,
    NewTask,
    Progress,
    Snapshot,
    TaskQuery,
    TaskStatus,
    new_run_id,
)
from tasks_core.reasons import CancelReason, delivery_limit_message, reason_error

__all__ = [
    "DELIVERY_LIMIT_ERROR",
    "MAX_BATCH",
    "MAX_LEASE_S",
    "BatchItem",
    "Decision",
    "Right",
    "apply_event",
    "authorize_event",
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
    "check_worker_id",
    "counts_as_active",
    "decide_transition",
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
]

Right = Literal["read", "cancel", "respond", "grant"]
MAX_LEASE_S = 7 * 86400
"""The longest lease, in seconds: every store refuses a longer one, and so does a worker."""
DELIVERY_LIMIT_ERROR = "DeliveryLimitExceeded"
DELIVERY_LIMIT_EVENT_ID = "store:delivery-limit"
_EVENT_TYPES = (
    InputRequested, InputResponsesAccepted, RetryRequested, Completed, Failed, Cancelled,
    WatcherAdded,
)
_ACTION: dict[Right, str] = {"read": "read", "cancel": "cancel", "respond": "respond to",
                             "grant": "grant watchers on"}
"""How a refusal names each right's action."""
_EVENT_RIGHT: dict[str, Right] = {
    "cancelled": "cancel",
    "input_responses_accepted": "respond",
    "watcher_added": "grant",
}


def tick(now: datetime) -> datetime:
    """Truncate ``now`` to the store resolution (UTC, whole milliseconds)."""
    now = utc(now)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def present(snapshot: Snapshot, now: datetime) -> Snapshot:
    """The snapshot as a reader sees it at ``now``: ``pending`` or ``running`` derived."""
    if snapshot.status in (TaskStatus.PENDING, TaskStatus.RUNNING):
        status = TaskStatus.RUNNING if snapshot.lease_live(now) else TaskStatus.PENDING
        if status != snapshot.status:
            return replaced(snapshot, status=status)
    return snapshot


def _stored(snapshot: Snapshot, **changes: object) -> Snapshot:
    if snapshot.status == TaskStatus.RUNNING:
        changes.setdefault("status", TaskStatus.PENDING)
    return replaced(snapshot, **changes)


def _expires_at(
    created_at: datetime,
    ttl_s: float | None,
    finished_at: datetime | None,
    retention_s: float | None,
) -> datetime | None:
    candidates = []
    if ttl_s is not None:
        candidates.append(created_at + timedelta(milliseconds=round(ttl_s * 1000)))
    if finished_at is not None and retention_s is not None:
        candidates.append(finished_at + timedelta(milliseconds=round(retention_s * 1000)))
    return min(candidates) if candidates else None


# -- creation ----------------------------------------------------------------------------


def new_snapshot(new: NewTask, now: datetime, *, replace: Snapshot | None = None) -> Snapshot:
    """The first snapshot (revision 0) of ``new`` created at ``now``.

    A replacement keeps the replaced task's lease generation so that every lease of the old
    run stays fenced.
    """
    now = tick(now)
    return Snapshot(
        id=new.id,
        tenant=new.tenant,
        owner=new.owner,
        watchers=new.watchers,
        queue=new.queue,
        work=new.work,
        run_id=new_run_id(),
        lease_generation=replace.lease_generation if replace else 0,
        ttl_s=new.ttl_s,
        retention_s=new.retention_s,
        created_at=now,
        updated_at=now,
        expires_at=_expires_at(now, new.ttl_s, None, None),
    )


def check_replace(current: Snapshot, replace: Snapshot, now: datetime) -> None:
    """Refuse to replace ``current`` unless it is the given run, at that revision, finished.

    Raises:
        RevisionConflict: ``current`` is another run or another revision than ``replace``.
        Unavailable: ``current`` is neither terminal nor expired.
    """
    if current.run_id != replace.run_id or current.revision != replace.revision:
        raise RevisionConflict(present(current, now), replace.revision)
    if not (current.terminal or current.expired(now)):
        raise Unavailable("Only a finished or expired task can be replaced")


def counts_as_active(snapshot: Snapshot, now: datetime) -> bool:
    """Whether ``snapshot`` counts against ``max_active_tasks_per_scope``."""
    return not snapshot.terminal and not snapshot.expired(now)


# -- authority ---------------------------------------------------------------------------


def can_see(snapshot: Snapshot, principal: Owner | System, visibility: str) -> bool:
    """Visibility (docs/security.md, Tenant isolation): same tenant, and System, owner,
    watcher — or anyone in the tenant under ``visibility="tenant"``."""
    if isinstance(principal, System):
        return principal.tenant is None or principal.tenant == snapshot.tenant
    if principal.tenant != snapshot.tenant:
        return False
    return visibility == "tenant" or _is_member(snapshot, principal)


def _is_member(snapshot: Snapshot, principal: Owner) -> bool:
    return snapshot.owner == principal or principal in snapshot.watchers


def check_request(snapshot: Snapshot, access: Access, right: Right, now: datetime) -> None:
    """Check request access for ``right``.

    Raises:
        TaskNotFound: expired, or invisible to the principal (reads exactly as missing).
        AuthorizationError: visible, but the principal lacks ``right``.
    """
    principal = access.principal
    if snapshot.expired(now) or not can_see(snapshot, principal, access.visibility):
        raise TaskNotFound(snapshot.id)
    if isinstance(principal, System):
        return
    if right == "grant":
        raise AuthorizationError("Only core grants watchers, at submit")
    if right != "read" and not _is_member(snapshot, principal):
        raise AuthorizationError(f"Not authorized to {_ACTION[right]} this task")


def check_lease(
    snapshot: Snapshot,
    token: str | None,
    lease: Lease,
    now: datetime,
    *,
    require_live: bool = True,
) -> None:
    """Check that ``lease`` is exactly the task's current lease (and live, by default).

    Raises:
        LeaseLost: another task, token, generation or worker; or expired at ``now``.
    """
    claim = snapshot.claim
    if (
        claim is None
        or token is None
        or lease.task_id != snapshot.id
        or not secrets.compare_digest(lease.token, token)
        or lease.generation != claim.generation
        or lease.worker_id != claim.worker_id
    ):
        raise LeaseLost()
    if require_live and (claim.ended or now >= claim.expires_at):
        raise LeaseLost("The lease has ended or expired")


def authorize_event(
    snapshot: Snapshot,
    token: str | None,
    authority: Lease | Access,
    event: Event,
    now: datetime,
    *,
    replayed: bool,
    lease_check: Callable[..., None] | None = None,
) -> None:
    """Step 2 of ``transition``: may ``authority`` send ``event`` to this task?

    A lease authorizes exactly the worker events; request access exactly the request
    events. ``lease_check`` replaces :func:`check_lease` (same signature).
    ``replayed`` (the event id is already in the history) lets the exact lease that
    sent it hear ``duplicate`` even after that lease ended.

    Raises:
        TaskNotFound: request access to a task it may not see.
        AuthorizationError: the wrong kind of authority, or a missing right.
        LeaseLost: not the exact current lease, or expired.
    """
    if isinstance(authority, Lease):
        if event.kind not in LEASE_EVENTS:
            raise AuthorizationError("A lease never authorizes request actions")
        (lease_check or check_lease)(snapshot, token, authority, now, require_live=not replayed)
        return
    if event.kind in LEASE_EVENTS:
        check_request(snapshot, authority, "read", now)
        raise AuthorizationError("Request access never authorizes worker events")
    check_request(snapshot, authority, _EVENT_RIGHT[event.kind], now)


def check_replay(record: EventRecord, event: Event) -> None:
    """Step 3 of ``transition`` for an event id already applied.

    Raises:
        EventIdReused: the id was applied with different content.
    """
    if record.event.kind != event.kind or record.event.content() != event.content():
        raise EventIdReused()


class Decision(NamedTuple):
    """What :func:`decide_transition` decided: the answer to the caller, and what to write
    atomically — the new snapshot and the event's record (``None``: write nothing)."""

    transition: Transition
    write: tuple[Snapshot, EventRecord] | None


def decide_transition(
    snapshot: Snapshot,
    token: str | None,
    earlier: Callable[[], EventRecord] | None,
    expected_revision: int,
    event: Event,
    authority: Lease | Access,
    now: datetime,
    *,
    lease_check: Callable[..., None] | None = None,
    revision_check: Callable[[Snapshot, int, datetime], None] | None = None,
) -> Decision:
    """``transition`` of the locked task at ``now``, decided: authorize (step 2), replay an
    event id already applied (step 3), check the revision (step 4), apply (step 5). Every
    store calls this and only makes the outcome atomic.

    ``earlier`` reads the history entry of ``event.event_id`` (``None``: not applied). It
    is called only after authorization, so a caller who may not see the task never
    learns that its history is damaged. ``lease_check`` and ``revision_check`` replace
    :func:`check_lease` and :func:`check_revision` (the contract suite's broken stores).

    Raises:
        TaskNotFound, AuthorizationError, LeaseLost: see :func:`authorize_event`.
        EventIdReused: the id was applied with different content.
        RevisionConflict: ``expected_revision`` is not the current revision.
        InvalidInput: the event does not apply to this task.
        StoreCorrupt: ``earlier`` found a damaged record.
    """
    authorize_event(snapshot, token, authority, event, now, replayed=earlier is not None,
                    lease_check=lease_check)
    if earlier is not None:
        record = earlier()
        check_replay(record, event)
        return Decision(
            Transition(outcome="duplicate", snapshot=present(snapshot, now), record=record), None
        )
    (revision_check or check_revision)(snapshot, expected_revision, now)
    applied = apply_event(snapshot, event, next_commit_time(snapshot, now))
    if applied is None:
        return Decision(Transition(outcome="unchanged", snapshot=present(snapshot, now)), None)
    new, record = applied
    return Decision(
        Transition(outcome="applied", snapshot=present(new, now), record=record), applied
    )


def check_revision(snapshot: Snapshot, expected_revision: int, now: datetime) -> None:
    """Step 4 of ``transition``.

    Raises:
        RevisionConflict: carrying the current snapshot.
    """
    if snapshot.revision != expected_revision:
        raise RevisionConflict(present(snapshot, now), expected_revision)


# -- events ------------------------------------------------------------------------------


def _terminal(
    snapshot: Snapshot, committed_at: datetime, status: TaskStatus, **changes: object
) -> dict[str, object]:
    update: dict[str, object] = {
        "status": status,
        "finished_at": committed_at,
        "retry_at": None,
        "input_requests": {},
        "expires_at": _expires_at(
            snapshot.created_at, snapshot.ttl_s, committed_at, snapshot.retention_s
        ),
    }
    update.update(changes)
    return update


def _end_claim(snapshot: Snapshot, at: datetime) -> ClaimInfo | None:
    claim = snapshot.claim
    if claim is None:
        return None
    return replaced(claim, expires_at=min(claim.expires_at, at), ended=True)


def apply_event(
    snapshot: Snapshot, event: Event, committed_at: datetime
) -> tuple[Snapshot, EventRecord] | None:
    """Step 5 of ``transition``: the new snapshot and history record, or ``None`` for a
    valid no-op (``unchanged``: anything after a terminal event, an answer to no
    outstanding key, a key asked twice, a watcher granted twice).

    ``committed_at`` must already be later than every earlier event of the task.

    Raises:
        InvalidInput: a watcher from another tenant.
    """
    if snapshot.terminal:
        return None
    update: dict[str, object]
    accepted: tuple[str, ...] | None = None
    if isinstance(event, InputRequested):
        if event.key in snapshot.input_history:
            return None
        update = {
            "status": TaskStatus.WAITING_INPUT,
            "input_requests": {**snapshot.input_requests, event.key: event.request},
            "input_history": (*snapshot.input_history, event.key),
        }
    elif isinstance(event, InputResponsesAccepted):
        matched = {k: v for k, v in event.responses.items() if k in snapshot.input_requests}
        if not matched:
            return None
        remaining = {k: v for k, v in snapshot.input_requests.items() if k not in matched}
        accepted = tuple(matched)
        update = {
            "status": TaskStatus.WAITING_INPUT if remaining else TaskStatus.PENDING,
            "input_requests": remaining,
            "accepted_input_responses": {**snapshot.accepted_input_responses, **matched},
        }
    elif isinstance(event, RetryRequested):
        failure = ErrorInfo(type=event.error, message=event.message)
        claim = _end_claim(snapshot, committed_at)
        if snapshot.work.retry_policy.allows_retry(snapshot.retry_count):
            count = snapshot.retry_count + 1
            update = {
                "status": TaskStatus.PENDING,
                "retry_count": count,
                "retry_at": committed_at + snapshot.work.retry_policy.delay_for(count),
                "last_failure": failure,
                "claim": claim,
            }
        else:
            update = _terminal(
                snapshot, committed_at, TaskStatus.FAILED,
                error=failure, last_failure=failure, claim=claim,
            )
    elif isinstance(event, Completed):
        update = _terminal(
            snapshot, committed_at, TaskStatus.COMPLETED,
            result=event.result, claim=_end_claim(snapshot, committed_at),
        )
    elif isinstance(event, Failed):
        update = _terminal(
            snapshot, committed_at, TaskStatus.FAILED,
            error=ErrorInfo(type=event.error, message=event.message),
            cancel_reason=CancelReason.TIMEOUT if event.reason == "timeout" else None,
            claim=_end_claim(snapshot, committed_at),
        )
    elif isinstance(event, Cancelled):
        error_type, message = reason_error(CancelReason.USER)
        # The lease stays live: its holder learns of the cancel on its next renew or write.
        update = _terminal(
            snapshot, committed_at, TaskStatus.CANCELLED,
            error=ErrorInfo(type=error_type, message=message),
            cancel_reason=CancelReason.USER,
        )
    elif isinstance(event, WatcherAdded):
        principal = event.principal
        if principal.tenant != snapshot.tenant:
            raise InvalidInput("A watcher must belong to the task's tenant")
        if principal == snapshot.owner or principal in snapshot.watchers:
            return None
        update = {"watchers": (*snapshot.watchers, principal)}
    else:  # pragma: no cover - the Event union is closed
        raise InvalidInput(f"unknown event kind {event.kind!r}")
    new = _stored(snapshot, revision=snapshot.revision + 1, updated_at=committed_at, **update)
    record = built(  # every value validated or derived here
        EventRecord,
        event=event,
        revision=new.revision,
        committed_at=utc(committed_at),
        status=new.status,
        retry_at=new.retry_at if isinstance(event, RetryRequested) else None,
        error=new.error if new.terminal else None,
        accepted=accepted,
    )
    return new, record


def next_commit_time(snapshot: Snapshot, now: datetime) -> datetime:
    """A commit instant at or after ``now`` and strictly after every earlier write."""
    now = tick(now)
    floor = snapshot.updated_at + timedelta(milliseconds=1)
    return max(now, floor)


# -- claims and leases -------------------------------------------------------------------


def check_lease_for(lease_for: float) -> timedelta:
    """Validate a lease duration in seconds (:func:`~tasks_core.durations.check_duration`).

    Raises:
        InvalidInput: not a finite number in (0, :data:`MAX_LEASE_S`].
    """
    seconds = check_duration(lease_for, "lease_for", high=MAX_LEASE_S)
    return timedelta(milliseconds=max(1, round(seconds * 1000)))


def check_worker_id(worker_id: str) -> str:
    """Validate a worker id.

    Raises:
        InvalidInput: not a non-empty string of at most 256 characters.
    """
    if not isinstance(worker_id, str) or not worker_id or len(worker_id) > 256:
        raise InvalidInput("worker_id must be a non-empty string of at most 256 characters")
    return worker_id


def check_queues(queues: Collection[str], *, allow_empty: bool = False) -> frozenset[str]:
    """Validate the queue names of ``claim_next``/``wait_for_work``.

    Raises:
        InvalidInput: a bare string, a bad name, or none at all (unless ``allow_empty``).
    """
    if isinstance(queues, str):
        raise InvalidInput("queues must be a collection of queue names, not a string")
    names = frozenset(check_name(q, what="queue") for q in queues)
    if not names and not allow_empty:
        raise InvalidInput("at least one queue is required")
    return names


def check_limit(limit: int, *, maximum: int | None = None) -> int:
    """Validate a batch size (``claim_next``: 1..1000; ``reap``: at least 1).

    Raises:
        InvalidInput: not an integer in range.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInput("limit must be a positive integer")
    if maximum is not None and limit > maximum:
        raise InvalidInput(f"limit must be an integer in 1..{maximum}")
    return limit


MAX_BATCH = 1000
"""The most items one ``transition_many`` takes (and one ``claim_next`` claims)."""

BatchItem = tuple[str, int, Event, Lease | Access]
"""One ``transition_many`` item: ``(task_id, expected_revision, event, authority)``."""


def check_batch(items: Sequence[BatchItem]) -> list[BatchItem]:
    """Validate the items of ``transition_many`` before anything is read or written.

    Raises:
        TypeError: not a sequence of ``(str, int, Event, Lease | Access)`` tuples.
        InvalidInput: more than :data:`MAX_BATCH` items.
    """
    candidate: object = items
    if isinstance(candidate, (str, bytes)) or not isinstance(candidate, Sequence):
        raise TypeError("transition_many takes a sequence of (task_id, revision, event, "
                        "authority) tuples")
    checked = list(items)
    if len(checked) > MAX_BATCH:
        raise InvalidInput(f"transition_many takes at most {MAX_BATCH} items")
    for item in checked:
        if not isinstance(item, tuple) or len(item) != 4:
            raise TypeError("each item must be a (task_id, revision, event, authority) tuple")
        task_id, revision, event, authority = item
        if not isinstance(task_id, str):
            raise TypeError("task_id must be a string")
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise TypeError("expected_revision must be an integer")
        if not isinstance(event, _EVENT_TYPES):
            raise TypeError("event must be an Event")
        if not isinstance(authority, (Lease, Access)):
            raise TypeError("authority must be a Lease or an Access")
    return checked


def check_claimable(snapshot: Snapshot, now: datetime) -> None:
    """May a worker claim this task at ``now``?

    Raises:
        Unavailable: terminal, expired, waiting for input, or under a live lease.
        Deferred: a retry is scheduled later than ``now``.
    """
    if snapshot.terminal or snapshot.expired(now):
        raise Unavailable("The task is finished")
    if snapshot.status == TaskStatus.WAITING_INPUT:
        raise Unavailable("The task is waiting for input")
    if snapshot.lease_live(now):
        raise Unavailable("The task is leased by a live worker")
    if snapshot.retry_at is not None and snapshot.retry_at > now:
        raise Deferred((snapshot.retry_at - now).total_seconds())


def is_claimable(snapshot: Snapshot, now: datetime) -> bool:
    """Whether :func:`check_claimable` passes."""
    return (
        not snapshot.terminal
        and not snapshot.expired(now)
        and snapshot.status != TaskStatus.WAITING_INPUT
        and not snapshot.lease_live(now)
        and (snapshot.retry_at is None or snapshot.retry_at <= now)
    )


_TOKEN_BYTES = 18
_TOKEN_TEXT = 24  # base64 characters of 18 bytes


def new_lease_token() -> str:
    """A fresh lease token (the secret a lease holder proves itself with; 144 random
    bits, URL-safe)."""
    return secrets.token_urlsafe(_TOKEN_BYTES)


def new_lease_tokens(count: int) -> list[str]:
    """``count`` fresh lease tokens, each as :func:`new_lease_token` makes one, from one
    read of the system's randomness: 18 bytes encode to exactly 24 URL-safe base64
    characters (no padding), so the encoding of their concatenation cut every 24
    characters is each token's own. (A claim of many tasks needs one token each.)"""
    text = base64.urlsafe_b64encode(secrets.token_bytes(_TOKEN_BYTES * count)).decode()
    return [text[start:start + _TOKEN_TEXT] for start in range(0, _TOKEN_TEXT * count,
                                                               _TOKEN_TEXT)]


def start_claim(
    snapshot: Snapshot, worker_id: str, lease_for: float, now: datetime
) -> tuple[Snapshot, str, Lease | None, EventRecord | None]:
    """Claim a claimable task: ``(new snapshot, token, lease, None)``.

    Beyond ``work.max_deliveries`` the claim fails the task instead:
    ``(failed snapshot, "", None, record of the failure)``; once that is written the
    store calls :func:`tasks_core.reports.delivery_limit`.
    The caller has checked :func:`check_claimable`.
    """
    duration = check_lease_for(lease_for)
    now = tick(now)
    if snapshot.deliveries >= snapshot.work.max_deliveries:
        failure = Failed(
            event_id=DELIVERY_LIMIT_EVENT_ID,
            error=DELIVERY_LIMIT_ERROR,
            message=delivery_limit_message(snapshot.work.max_deliveries),
        )
        applied = apply_event(snapshot, failure, next_commit_time(snapshot, now))
        assert applied is not None  # a claimable task is not terminal
        return applied[0], "", None, applied[1]
    generation = snapshot.lease_generation + 1
    token = new_lease_token()
    expires_at = now + duration
    previous = snapshot.claim
    recovered = previous is not None and not previous.ended
    new = _stored(
        snapshot,
        claim=ClaimInfo(
            worker_id=worker_id, generation=generation, expires_at=expires_at, recovered=recovered
        ),
        lease_generation=generation,
        deliveries=snapshot.deliveries + 1,
        started_at=snapshot.started_at or now,
        retry_at=None,
        progress=None,
        updated_at=max(now, snapshot.updated_at),
    )
    lease = Lease(
        task_id=snapshot.id,
        worker_id=worker_id,
        token=token,
        generation=generation,
        expires_at=expires_at,
    )
    return new, token, lease, None


def renew(
    snapshot: Snapshot, token: str | None, lease: Lease, lease_for: float, now: datetime
) -> tuple[Snapshot, str, Lease]:
    """Extend a live lease: ``(new snapshot, new token, new lease)``; the old lease is stale.

    Raises:
        LeaseLost: see :func:`check_lease`.
        InvalidInput: bad ``lease_for``.
    """
    duration = check_lease_for(lease_for)
    now = tick(now)
    check_lease(snapshot, token, lease, now)
    assert snapshot.claim is not None
    expires_at = now + duration
    new_token = new_lease_token()
    new = _stored(
        snapshot,
        claim=replaced(snapshot.claim, expires_at=expires_at),
        updated_at=max(now, snapshot.updated_at),
    )
    return new, new_token, replaced(lease, token=new_token, expires_at=expires_at)


def release(snapshot: Snapshot, token: str | None, lease: Lease, now: datetime) -> Snapshot:
    """End the lease at once (expiry is not checked): the task is claimable again.

    Raises:
        LeaseLost: see :func:`check_lease`.
    """
    now = tick(now)
    check_lease(snapshot, token, lease, now, require_live=False)
    return _stored(
        snapshot,
        claim=_end_claim(snapshot, now),
        updated_at=max(now, snapshot.updated_at),
    )


def report_progress(
    snapshot: Snapshot,
    token: str | None,
    lease: Lease,
    value: float,
    message: str | None,
    now: datetime,
) -> Snapshot:
    """Record progress (not revisioned). On a terminal task nothing changes.

    Raises:
        LeaseLost: see :func:`check_lease`.
        InvalidInput: ``value`` outside 0..100.
    """
    progress = Progress(value=value, message=message)
    now = tick(now)
    check_lease(snapshot, token, lease, now)
    if snapshot.terminal:
        return snapshot
    return _stored(snapshot, progress=progress, updated_at=max(now, snapshot.updated_at))


# -- listing -----------------------------------------------------------------------------


def matches(snapshot: Snapshot, query: TaskQuery, now: datetime) -> bool:
    """Whether ``snapshot`` belongs in the listing ``query`` at ``now`` (ignoring paging)."""
    if snapshot.expired(now):
        return False
    if query.tenant is not None and snapshot.tenant != query.tenant:
        return False
    if query.principal is not None and not _is_member(snapshot, query.principal):
        return False
    if query.queue is not None and snapshot.queue != query.queue:
        return False
    return query.statuses is None or present(snapshot, now).status in query.statuses
