"""Small builders shared by the contract tests: tasks, principals, access, claims."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from tasks_core import (
    Access,
    App,
    Cancelled,
    Claim,
    Completed,
    Event,
    Failed,
    Lease,
    ManualClock,
    NewTask,
    Owner,
    RetryPolicy,
    Snapshot,
    System,
    TaskStore,
    Work,
)

ALICE = Owner("alice")
BOB = Owner("bob")
MALLORY = Owner("mallory", tenant="evil")
SYSTEM = System()
LEASE_S = 30.0

_ids = itertools.count(1)


def task_id(prefix: str = "t") -> str:
    """A fresh task id, increasing in creation order (ids sort like creation)."""
    return f"{prefix}{next(_ids):06d}"


def new_task(
    id: str | None = None,
    *,
    owner: Owner | None = ALICE,
    tenant: str | None = None,
    queue: str = "default",
    watchers: tuple[Owner, ...] = (),
    input: Any = None,
    retry: RetryPolicy | None = None,
    max_deliveries: int = 25,
    timeout_s: float | None = None,
    ttl_s: float | None = None,
    retention_s: float | None = None,
    name: str = "job",
    delay_s: float | None = None,
    run_at: datetime | None = None,
    priority: int = 0,
) -> NewTask:
    """A ``NewTask`` with sensible defaults for tests."""
    tenant = tenant or (owner.tenant if owner else "default")
    return NewTask(
        id=id or task_id(),
        tenant=tenant,
        owner=owner,
        watchers=watchers,
        queue=queue,
        work=Work(
            name=name,
            input=input,
            retry_policy=retry or RetryPolicy.none(),
            max_deliveries=max_deliveries,
            timeout_s=timeout_s,
        ),
        ttl_s=ttl_s,
        retention_s=retention_s,
        delay_s=delay_s,
        run_at=run_at,
        priority=priority,
    )


def access(principal: Owner | System, visibility: str = "watchers") -> Access:
    """Request authority for ``principal`` under ``visibility``."""
    return Access(principal=principal, visibility=visibility)


async def claim(
    store: TaskStore, task_id: str, worker: str = "w1", lease_for: float = LEASE_S
) -> Claim:
    """Claim exactly ``task_id``."""
    return await store.claim(task_id, worker, lease_for)


async def created_and_claimed(
    store: TaskStore, worker: str = "w1", **task: Any
) -> Claim:
    """Create a task and claim it."""
    snapshot = await store.create(new_task(**task))
    return await store.claim(snapshot.id, worker, LEASE_S)


async def finished_task(store: TaskStore, end: str = "completed", **task: Any) -> Snapshot:
    """Create a task, claim it, and end it with ``end``.

    ``completed`` and ``failed`` are sent by the lease holder (ending its lease);
    ``cancelled`` is sent by the owner (System for an owner-less task), which leaves the
    lease live. Returns the terminal snapshot.
    """
    claimed = await created_and_claimed(store, **task)
    snapshot, lease = claimed
    event: Event
    authority: Lease | Access = lease
    if end == "completed":
        event = Completed(event_id="finish", result={"ok": True})
    elif end == "failed":
        event = Failed(event_id="finish", error="Boom", message="it broke")
    elif end == "cancelled":
        event = Cancelled(event_id="finish")
        authority = access(snapshot.owner or SYSTEM)
    else:
        raise ValueError(f"unknown end {end!r}")
    done = await store.transition(snapshot.id, snapshot.revision, event, authority)
    assert done.outcome == "applied", done
    return done.snapshot


async def submitted_in_order(app: App, job: Any, clock: ManualClock, count: int) -> list[str]:
    """Submit ``count`` tasks of ``job`` (no input, as ``ALICE``) a millisecond apart on
    ``clock``: claims take them in this order."""
    ids = []
    for _ in range(count):
        ids.append((await app.submit(job, None, ALICE)).id)
        clock.advance(0.001)
    return ids
