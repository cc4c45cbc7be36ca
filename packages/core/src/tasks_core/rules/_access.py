"""Authority: who may see a task, who may do what to it, and which lease is the current
one. An invisible task reads exactly like a missing one (``TaskNotFound``)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Literal

from tasks_core.authority import Access, Owner, System
from tasks_core.errors import (
    AuthorizationError,
    LeaseLost,
    TaskNotFound,
)
from tasks_core.events import (
    LEASE_EVENTS,
    Event,
)
from tasks_core.models import (
    Lease,
    Snapshot,
)

Right = Literal["read", "cancel", "respond", "grant"]
_ACTION: dict[Right, str] = {"read": "read", "cancel": "cancel", "respond": "respond to",
                             "grant": "grant watchers on"}
"""How a refusal names each right's action."""
_EVENT_RIGHT: dict[str, Right] = {
    "cancelled": "cancel",
    "input_responses_accepted": "respond",
    "watcher_added": "grant",
}


def can_see(snapshot: Snapshot, principal: Owner | System, visibility: str) -> bool:
    """Visibility (docs/security.md, Tenant isolation): same tenant, and System, owner,
    watcher — or anyone in the tenant under ``visibility="tenant"``."""
    if isinstance(principal, System):
        return principal.tenant is None or principal.tenant == snapshot.tenant
    if principal.tenant != snapshot.tenant:
        return False
    return visibility == "tenant" or is_member(snapshot, principal)


def is_member(snapshot: Snapshot, principal: Owner) -> bool:
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
    if right != "read" and not is_member(snapshot, principal):
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
