"""Claims and leases: what may be claimed, a claim started (or failed past its delivery
limit), a lease renewed or released, progress recorded. Lease tokens are the only
randomness of the rules."""

from __future__ import annotations

import base64
import secrets
from datetime import datetime

from tasks_core._model import built, replaced
from tasks_core.arguments import check_lease_for, check_worker_id
from tasks_core.errors import (
    Deferred,
    Unavailable,
)
from tasks_core.events import (
    EventRecord,
    Failed,
)
from tasks_core.models import (
    ClaimInfo,
    Lease,
    Progress,
    Snapshot,
    TaskStatus,
)
from tasks_core.reasons import delivery_limit_message
from tasks_core.rules._access import check_lease
from tasks_core.rules._events import _end_claim, apply_event, next_commit_time
from tasks_core.rules._snapshots import _stored, available_at, tick

DELIVERY_LIMIT_ERROR = "DeliveryLimitExceeded"
DELIVERY_LIMIT_EVENT_ID = "store:delivery-limit"


def check_claimable(snapshot: Snapshot, now: datetime) -> None:
    """May a worker claim this task at ``now``?

    Raises:
        Unavailable: terminal, expired, waiting for input, or under a live lease.
        Deferred: its available instant (a retry, or a delayed task's ``run_at``) lies
            later than ``now``.
    """
    if snapshot.terminal or snapshot.expired(now):
        raise Unavailable("The task is finished")
    if snapshot.status == TaskStatus.WAITING_INPUT:
        raise Unavailable("The task is waiting for input")
    if snapshot.lease_live(now):
        raise Unavailable("The task is leased by a live worker")
    if (available := available_at(snapshot)) > now:
        raise Deferred((available - now).total_seconds())


def is_claimable(snapshot: Snapshot, now: datetime) -> bool:
    """Whether :func:`check_claimable` passes."""
    return (
        not snapshot.terminal
        and not snapshot.expired(now)
        and snapshot.status != TaskStatus.WAITING_INPUT
        and not snapshot.lease_live(now)
        and available_at(snapshot) <= now
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
    snapshot: Snapshot, worker_id: str, lease_for: float, now: datetime, *, held: bool = False
) -> tuple[Snapshot, str, Lease | None, EventRecord | None]:
    """Claim a claimable task: ``(new snapshot, token, lease, None)``; ``held``: claimed
    ahead of a free slot (``ClaimInfo.held``, read as ``claimed`` until renewed).

    Beyond ``work.max_deliveries`` the claim fails the task instead:
    ``(failed snapshot, "", None, record of the failure)``; once that is written the
    store calls :func:`tasks_core.reports.delivery_limit`.
    The caller has checked :func:`check_claimable`.

    Raises:
        InvalidInput: ``worker_id`` or ``lease_for`` out of range.
    """
    duration = check_lease_for(lease_for)
    check_worker_id(worker_id)
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
    new = _stored(  # the claim and the lease: every value checked or derived here
        snapshot,
        claim=built(
            ClaimInfo, worker_id=worker_id, generation=generation, expires_at=expires_at,
            ended=False, recovered=recovered, held=held,
        ),
        lease_generation=generation,
        deliveries=snapshot.deliveries + 1,
        started_at=snapshot.started_at or now,
        retry_at=None,
        progress=None,
        updated_at=max(now, snapshot.updated_at),
    )
    lease = built(Lease, task_id=snapshot.id, worker_id=worker_id, token=token,
                  generation=generation, expires_at=expires_at)
    return new, token, lease, None


def renew(
    snapshot: Snapshot, token: str | None, lease: Lease, lease_for: float, now: datetime
) -> tuple[Snapshot, str, Lease]:
    """Extend a live lease: ``(new snapshot, new token, new lease)``; the old lease is stale.
    A held claim is held no more: its holder renews it when the handler starts.

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
        claim=replaced(snapshot.claim, expires_at=expires_at, held=False),
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

