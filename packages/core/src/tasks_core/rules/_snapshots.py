"""Snapshots as stored and as read: store instants, creation, replacement, the derived
``pending``/``running`` status and listing matches.

Stored snapshots carry ``pending`` rather than ``running``; :func:`present` derives
``running`` (a non-terminal, non-waiting task with a live lease) for the reader. All store
instants are whole milliseconds (:func:`tick`), so every backend reads back exactly what
it wrote."""

from __future__ import annotations

from datetime import datetime, timedelta

from tasks_core._model import replaced
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


def present(snapshot: Snapshot, now: datetime) -> Snapshot:
    """The snapshot as a reader sees it at ``now``: ``pending``, ``running`` or ``claimed``
    (a live lease held ahead of a free slot) derived."""
    if snapshot.status.stored == TaskStatus.PENDING:
        claim = snapshot.claim
        status = (TaskStatus.PENDING if claim is None or not snapshot.lease_live(now)
                  else TaskStatus.CLAIMED if claim.held else TaskStatus.RUNNING)
        if status != snapshot.status:
            return replaced(snapshot, status=status)
    return snapshot


def _stored(snapshot: Snapshot, **changes: object) -> Snapshot:
    if snapshot.status != snapshot.status.stored:
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
