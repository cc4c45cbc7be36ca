"""Snapshots as stored and as read: store instants, creation, replacement, the available
instant, the derived statuses and listing matches.

Stored snapshots carry ``pending``; :func:`present` derives ``running``/``claimed`` (a
live lease) and ``scheduled`` (``run_at`` ahead) for the reader. A delay is added to the
store's ``now`` in :func:`new_snapshot`, never to a client's clock. All store instants are
whole milliseconds (:func:`tick`), so every backend reads back exactly what it wrote."""

from __future__ import annotations

from datetime import datetime, timedelta

from tasks_core._model import built, replaced
from tasks_core.clock import utc
from tasks_core.errors import (
    RevisionConflict,
    Unavailable,
)
from tasks_core.models import (
    NewTask,
    Snapshot,
    TaskQuery,
    TaskStatus,
    new_run_id,
)
from tasks_core.rules._access import is_member


def tick(now: datetime) -> datetime:
    """Truncate ``now`` to the store resolution (UTC, whole milliseconds)."""
    now = utc(now)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def available_at(snapshot: Snapshot) -> datetime:
    """The task's available instant: from when ``claim_next`` may serve it (a pending task
    without a live lease), and its place in claim order — its ``retry_at`` while a retry
    is pending, else its ``run_at`` when it was delayed, else its creation."""
    return snapshot.retry_at or snapshot.run_at or snapshot.created_at


def present(snapshot: Snapshot, now: datetime) -> Snapshot:
    """The snapshot as a reader sees it at ``now``: ``pending``, ``running`` or ``claimed``
    (a live lease held ahead of a free slot) or ``scheduled`` (its ``run_at`` ahead)
    derived."""
    if snapshot.status.stored == TaskStatus.PENDING:
        claim = snapshot.claim
        if claim is not None and snapshot.lease_live(now):
            status = TaskStatus.CLAIMED if claim.held else TaskStatus.RUNNING
        elif snapshot.run_at is not None and snapshot.run_at > now:
            status = TaskStatus.SCHEDULED
        else:
            status = TaskStatus.PENDING
        if status != snapshot.status:
            return replaced(snapshot, status=status)
    return snapshot


def _stored(snapshot: Snapshot, **changes: object) -> Snapshot:
    if snapshot.status != snapshot.status.stored:
        changes.setdefault("status", TaskStatus.PENDING)
    return replaced(snapshot, **changes)


_UNDER_A_MILLISECOND = timedelta(microseconds=999)
"""Added before :func:`tick` truncates: an instant rounded up to the millisecond."""


def _milliseconds(seconds: float) -> timedelta:
    return timedelta(milliseconds=round(seconds * 1000))


def ttl_end(snapshot: Snapshot) -> datetime | None:
    """When the task's ``ttl`` ends (``None``: no ttl): it counts from when the task was
    first available, its ``run_at`` or its creation."""
    return _ttl_from(snapshot.run_at or snapshot.created_at, snapshot.ttl_s)


def _ttl_from(available_from: datetime, ttl_s: float | None) -> datetime | None:
    return None if ttl_s is None else available_from + _milliseconds(ttl_s)


def _expires_at(
    ttl_ends: datetime | None, finished_at: datetime | None, retention_s: float | None
) -> datetime | None:
    """The earlier of the ttl's end and the end of retention after the finish."""
    candidates = [] if ttl_ends is None else [ttl_ends]
    if finished_at is not None and retention_s is not None:
        candidates.append(finished_at + _milliseconds(retention_s))
    return min(candidates) if candidates else None


# -- creation ----------------------------------------------------------------------------


def new_snapshot(new: NewTask, now: datetime, *, replace: Snapshot | None = None) -> Snapshot:
    """The first snapshot (revision 0) of ``new`` created at ``now``.

    A delayed task's ``run_at`` is ``now`` plus ``new.delay_s``, or ``new.run_at`` rounded
    up to the millisecond (never served early; an earlier instant than ``now`` becomes
    ``now``); its ``ttl`` counts from its ``run_at``.
    A replacement keeps the replaced task's lease generation so that every lease of the old
    run stays fenced.

    Rule: the snapshot is :func:`~tasks_core.models.built`, not validated again: every
    value is ``new``'s (validated when it was made), a default of the model, or derived
    here from ``now`` (UTC, whole milliseconds).
    """
    now = tick(now)
    run_at = (now + _milliseconds(new.delay_s) if new.delay_s is not None
              else None if new.run_at is None else tick(new.run_at + _UNDER_A_MILLISECOND))
    if run_at is not None:
        run_at = max(now, run_at)
    return built(Snapshot, **_DEFAULTS | {
        "id": new.id,
        "tenant": new.tenant,
        "owner": new.owner,
        "watchers": new.watchers,
        "queue": new.queue,
        "work": new.work,
        "run_id": new_run_id(),
        "input_requests": {},
        "accepted_input_responses": {},
        "lease_generation": replace.lease_generation if replace else 0,
        "ttl_s": new.ttl_s,
        "retention_s": new.retention_s,
        "created_at": now,
        "updated_at": now,
        "expires_at": _ttl_from(run_at or now, new.ttl_s),
        "run_at": run_at,
        "priority": new.priority,
    })


_DEFAULTS = {name: field.default for name, field in Snapshot.model_fields.items()}
"""Every field of a snapshot, in the model's order (which the stored text keeps), at its
default: immutable values (``pending``, 0, ``None``, ``()``); :func:`new_snapshot` gives
each field that has none, or a mutable one."""


def check_replace(current: Snapshot, replace: Snapshot, now: datetime) -> None:
    """Refuse to replace ``current`` unless it is the given run, at that revision, finished.

    Raises:
        RevisionConflict: ``current`` is another run or another revision than ``replace``.
        Unavailable: ``current`` is neither terminal nor expired, or a run past its TTL
            still holds a live lease on it (:func:`gone`).
    """
    if current.run_id != replace.run_id or current.revision != replace.revision:
        raise RevisionConflict(present(current, now), replace.revision)
    if not (current.terminal or current.expired(now)):
        raise Unavailable("Only a finished or expired task can be replaced")
    if not current.terminal and current.lease_live(now):
        raise Unavailable(HELD_PAST_TTL)


HELD_PAST_TTL = ("the task of this id is past its ttl, but a run still holds its lease: "
                 "try again once that run has ended")
"""Why a task past its TTL is neither replaced nor reaped yet (:func:`gone`)."""


def gone(snapshot: Snapshot, now: datetime) -> bool:
    """Whether ``snapshot`` is gone for good at ``now``: expired, and not a run's that
    outlived its TTL — an unfinished task under a live lease keeps its row, invisible to
    requests, until that lease ends: the reaper leaves it and no new run of its id starts
    beside it (:func:`check_replace`). (A finished task's lease is over: a cancel fences
    a holder still running.)"""
    return snapshot.expired(now) and (snapshot.terminal or not snapshot.lease_live(now))


def counts_as_active(snapshot: Snapshot, now: datetime) -> bool:
    """Whether ``snapshot`` counts against ``max_active_tasks_per_scope``."""
    return active_at(snapshot.status, snapshot.expires_at, now)


def active_at(status: TaskStatus, expires_at: datetime | None, now: datetime) -> bool:
    """:func:`counts_as_active` from a task's status and expiry alone — what a store keeps
    beside the document, so that a damaged document still counts as last written: not
    finished, and not expired at ``now``."""
    return not status.terminal and (expires_at is None or now < expires_at)


# -- listing -----------------------------------------------------------------------------


def matches(snapshot: Snapshot, query: TaskQuery, now: datetime) -> bool:
    """Whether ``snapshot`` belongs in the listing ``query`` at ``now`` (ignoring paging)."""
    if snapshot.expired(now):
        return False
    if query.tenant is not None and snapshot.tenant != query.tenant:
        return False
    if query.principal is not None and not is_member(snapshot, query.principal):
        return False
    if query.queue is not None and snapshot.queue != query.queue:
        return False
    return query.statuses is None or present(snapshot, now).status in query.statuses
