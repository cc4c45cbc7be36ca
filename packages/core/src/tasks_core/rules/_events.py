"""Events: ``transition`` decided (authorize, replay, revision, apply) and each event
applied to a snapshot, with its history record. Every store calls
:func:`decide_transition` and only makes the outcome atomic."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import NamedTuple

from tasks_core._model import built, replaced
from tasks_core.authority import Access
from tasks_core.clock import utc
from tasks_core.errors import (
    EventIdReused,
    InvalidInput,
    RevisionConflict,
)
from tasks_core.events import (
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
    Snapshot,
    TaskStatus,
)
from tasks_core.reasons import CancelReason, reason_error
from tasks_core.rules._access import authorize_event
from tasks_core.rules._snapshots import _expires_at, _stored, present, tick, ttl_end


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
        "expires_at": _expires_at(ttl_end(snapshot), committed_at, snapshot.retention_s),
    }
    update.update(changes)
    return update


def _end_claim(snapshot: Snapshot, at: datetime) -> ClaimInfo | None:
    claim = snapshot.claim
    if claim is None:
        return None
    return replaced(claim, expires_at=min(claim.expires_at, at), ended=True, held=False)


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
        claim = snapshot.claim
        if claim is not None and not claim.ended and not snapshot.lease_live(committed_at):
            # The holder died while its run waited for input: no more was lost than a
            # park loses, so the next claim is no takeover (``recover="fail"`` spares it).
            update["claim"] = _end_claim(snapshot, committed_at)
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

