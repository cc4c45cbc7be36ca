"""Submit: create a task, join a live key, or start a new run of a finished key.

The App validates what it can first (input, queue, sizes, authority); this module decides
what a taken id means: none, create it (``created``); a live task, the submitter and its
``watchers=`` join it as watchers, the submitted input and options ignored (``joined``); a
finished task, a new run replaces it atomically, keeping the owner and watchers; an expired
one (not yet reaped) reads as missing: the submitter's own task replaces it, once no run
past its ttl holds it (``replaced``). Joining or re-running a task you do not own, or adding
anyone who is not a member, needs the policy's ``watch_authorizer``. Keyed ids embed the
tenant, so a key never meets another tenant's task; should an id ever do so, it is refused
like a missing right. Everything refused is refused before anything is written.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from tasks_core import rules
from tasks_core._json import check_payload
from tasks_core.authority import (
    Access,
    Authority,
    Owner,
    System,
    check_dedup,
    check_key,
    check_principal,
    scoped_task_key,
)
from tasks_core.definitions import Submitted, TaskDef
from tasks_core.errors import (
    AuthorizationError,
    CapacityExceeded,
    InvalidInput,
    RevisionConflict,
    StoreUnavailable,
    TaskExists,
    TaskNotFound,
    Unavailable,
)
from tasks_core.events import WatcherAdded
from tasks_core.models import NewTask, Snapshot, TaskQuery, TaskStatus
from tasks_core.policy import MAX_WATCHERS, Limits, Policy
from tasks_core.random_ids import random_task_id
from tasks_core.store import TaskStore

__all__ = [
    "MAX_RACES",
    "Submitted",
    "as_read",
    "check_input",
    "check_join",
    "check_owner_runs",
    "check_watchers",
    "grant_watcher",
    "new_task_id",
    "submit",
]

log = logging.getLogger("tasks_core._submit")  # a stable name: logging configs refer to it

MAX_RACES = 8
"""How often submit re-reads after losing a race before giving up."""

_LIVE = frozenset(status for status in TaskStatus if not status.terminal)


async def submit(
    store: TaskStore,
    policy: Policy,
    limits: Limits,
    new: NewTask,
    authority: Authority,
    *,
    keyed: bool,
    transaction: Any = None,
    known: Snapshot | None = None,
) -> Submitted:
    """Create ``new``, or join/replace the task that holds its id (module docstring); a
    create or replace is written inside ``transaction`` when one is given. ``known``: the
    task already read at that id (the first try joins or replaces it, creating nothing).

    Raises:
        AuthorizationError: joining a task the submitter may not join.
        CapacityExceeded: a store capacity or ``max_runs_per_owner``.
        StoreUnavailable: the store failed, or submit lost ``MAX_RACES`` races in a row.
    """
    for _ in range(MAX_RACES):
        await _check_owner_runs(store, limits, new)
        current = known
        known = None
        if current is None:
            try:
                snapshot = await _create(store, new, transaction=transaction)
            except TaskExists as exc:
                if not keyed:
                    raise
                current = exc.current
            else:
                return Submitted(snapshot.id, snapshot.run_id, "created", snapshot)
        done = await _existing(store, policy, limits, new, authority, current, transaction)
        if done is not None:
            return done
    raise StoreUnavailable(f"submit of {new.id!r} kept losing races; try again")


async def _existing(
    store: TaskStore,
    policy: Policy,
    limits: Limits,
    new: NewTask,
    authority: Authority,
    current: Snapshot,
    transaction: Any,
) -> Submitted | None:
    """Join or replace ``current``; ``None`` when a race means: start over."""
    now = await store.now()
    newcomers = check_join(policy, new, authority, current, now,
                           in_transaction=transaction is not None)
    if joins(current, now):
        snapshot = current
        for principal in newcomers:
            granted = await grant_watcher(store, policy, snapshot, principal)
            if granted is None:
                return None
            snapshot = granted
        return Submitted(snapshot.id, snapshot.run_id, "joined", snapshot)
    replacement = new if current.expired(now) else new.model_copy(
        update={"owner": current.owner, "watchers": (*current.watchers, *newcomers)}
    )
    if replacement.owner is not None and replacement.owner != new.owner:
        # The run is owned by the key's owner; count it against them, not the submitter.
        await _check_owner_runs(store, limits, replacement)
    try:
        snapshot = await _create(store, replacement, replace=current, transaction=transaction)
    except (RevisionConflict, TaskNotFound, Unavailable) as exc:
        log.debug("submit of %r raced (%s); re-reading", new.id, type(exc).__name__)
        return None
    return Submitted(snapshot.id, snapshot.run_id, "replaced", snapshot)


def joins(current: Snapshot, now: datetime) -> bool:
    """Whether a submit of ``current``'s key at ``now`` joins it (live and not expired);
    else it starts a new run."""
    return current.status in _LIVE and not current.expired(now)


def check_join(
    policy: Policy, new: NewTask, authority: Authority, current: Snapshot, now: datetime,
    *, in_transaction: bool = False,
) -> tuple[Owner, ...]:
    """Whether ``authority`` may join (or re-run) ``current``, the task holding
    ``new.id``, at ``now``; nothing is read or written. An owner who is not the task's
    needs the watch authorizer to start a new run of it (the run is the task's owner's,
    with the submitter's input — watchers included), and to join it with principals it
    does not have (the submitter, or the watchers named); joining a live task as one of its
    members grants nothing and needs nothing. ``in_transaction``: the submit runs inside
    the application's transaction, where a join that grants principals is refused — the
    grant is a write of the store's own, which would wait for the locks that transaction
    holds (the creators' row, the task's row, SQLite's write lock) while it waits for the
    grant. An expired task is a missing one: nothing is asked, and the submitter's task
    replaces it — unless a run past its ttl still holds it (``rules.gone``).

    Returns:
        The principals the join grants (the submitter and the watchers it names).

    Raises:
        AuthorizationError: another tenant's task, or the watch authorizer said no.
        Unavailable: ``in_transaction`` and a join that would grant principals; or an
            expired task a run still holds (``rules.HELD_PAST_TTL``).
    """
    if current.tenant != new.tenant:
        raise AuthorizationError("This key is taken")
    if current.expired(now):  # a missing task: the submitter's own new run, unless held
        if not rules.gone(current, now):
            raise Unavailable(rules.HELD_PAST_TTL)
        return ()
    newcomers = _newcomers(current, authority, new.watchers)
    if (
        isinstance(authority, Owner)
        and authority != current.owner
        and (newcomers or not joins(current, now))
        and not policy.allows_watch(current.id, newcomers, authority)
    ):
        raise AuthorizationError("Not authorized to join this task")
    if in_transaction and newcomers and joins(current, now):
        raise Unavailable("joining the live task of this key grants watchers, which cannot "
                          "be written inside your transaction (they would wait for its "
                          "locks): submit it outside the transaction")
    return newcomers


async def _create(
    store: TaskStore, new: NewTask, *, replace: Snapshot | None = None, transaction: Any
) -> Snapshot:
    """``store.create``, naming ``transaction`` only when there is one (a store without
    ``transactional_submit`` need not know the keyword); the task as a read right after
    it shows it (:func:`as_read`)."""
    if transaction is None:
        return as_read(await store.create(new, replace=replace))
    return as_read(await store.create(new, replace=replace, transaction=transaction))


def as_read(snapshot: Snapshot) -> Snapshot:
    """A task a store has just written, as a read at that instant shows it
    (``rules.present`` at its ``updated_at``: ``scheduled`` while its ``run_at`` is ahead).
    A store returns what it stored; what the caller is handed is what it would read."""
    return rules.present(snapshot, snapshot.updated_at)


def _newcomers(
    current: Snapshot, authority: Authority, watchers: tuple[Owner, ...]
) -> tuple[Owner, ...]:
    candidates = ([authority] if isinstance(authority, Owner) else []) + list(watchers)
    members = {_identity(p) for p in (current.owner, *current.watchers) if p is not None}
    seen: dict[tuple[str, str], Owner] = {}
    for principal in candidates:
        if _identity(principal) not in members:
            seen.setdefault(_identity(principal), principal)
    return tuple(seen.values())


async def grant_watcher(
    store: TaskStore, policy: Policy, snapshot: Snapshot, principal: Owner
) -> Snapshot | None:
    """Add ``principal`` as a watcher of the live ``snapshot`` (core only, at submit).

    Returns:
        The task afterwards, or ``None`` when it finished or went away meanwhile.
    """
    digest = hashlib.sha256(f"{principal.tenant}\n{principal.user_id}".encode()).hexdigest()
    event = WatcherAdded(event_id=f"{snapshot.run_id}:watcher:{digest[:24]}", principal=principal)
    access = Access(principal=System(snapshot.tenant), visibility=policy.visibility)
    revision = snapshot.revision
    for _ in range(MAX_RACES):
        try:
            result = await store.transition(snapshot.id, revision, event, access)
        except RevisionConflict as exc:
            if exc.current.run_id != snapshot.run_id:
                return None
            revision = exc.current.revision
            continue
        except TaskNotFound:
            return None
        if result.outcome == "unchanged" and result.snapshot.terminal:
            return None
        return result.snapshot
    return None


async def _check_owner_runs(store: TaskStore, limits: Limits, new: NewTask) -> None:
    """Refuse a new run beyond ``limits.max_runs_per_owner`` live tasks of its owner.

    Raises:
        CapacityExceeded: ``max_runs_per_owner``.
    """
    await check_owner_runs(store, limits, new.owner, new.tenant, {new.id})


async def check_owner_runs(
    store: TaskStore, limits: Limits, owner: Owner | None, tenant: str, ids: Collection[str]
) -> None:
    """Refuse runs of ``ids`` (each a live run afterwards) when ``owner``'s other live
    tasks and they would pass ``limits.max_runs_per_owner``.

    Raises:
        CapacityExceeded: ``max_runs_per_owner``.
    """
    cap = limits.max_runs_per_owner
    if cap is None or owner is None:
        return
    query = TaskQuery(tenant=tenant, principal=owner, statuses=_LIVE, limit=1000)
    count = len(ids)
    while True:
        page = await store.list(query)
        count += sum(1 for s in page if s.owner == owner and s.id not in ids)
        if count > cap:
            raise CapacityExceeded("max_runs_per_owner")
        if len(page) < query.limit:
            return
        query = query.model_copy(update={"after": page[-1].id})


def check_input(
    input: Mapping[str, Any] | None, definition: TaskDef | None, limits: Limits
) -> dict[str, Any] | None:
    """The input as stored: a JSON object (or ``None``) within ``limits.max_input_bytes``
    that binds to the handler when it is known.

    Raises:
    InvalidInput: naming the rule that failed; nothing was written.
    """
    if input is None:
        data = None
    elif isinstance(input, Mapping):
        data = dict(input)
    else:
        raise InvalidInput("input must be a dict of the handler's keyword arguments, or None")
    check_payload(data, "input", limits.max_input_bytes)
    if definition is not None:
        definition.check_input(data)
    return data

def new_task_id(key: str | None, owner: Owner | None, *, dedup: str, tenant: str) -> str:
    """The id of a new task: its ``key`` scoped by ``dedup``
    (:func:`~tasks_core.authority.scoped_task_key`), or without a key a random id — and
    then ``dedup`` other than ``"owner"`` is refused, never ignored (the caller meant a key).

    Raises:
        InvalidInput: a bad dedup (:func:`~tasks_core.authority.check_dedup`, first) or
            key.
    """
    check_dedup(dedup)
    if key is None:
        if dedup != "owner":
            raise InvalidInput("dedup applies to a key: give key=, or leave dedup out")
        return random_task_id()
    return scoped_task_key(check_key(key), owner, dedup=dedup, tenant=tenant)


def check_watchers(
    watchers: Sequence[Owner], tenant: str, owner: Owner | None
) -> tuple[Owner, ...]:
    """The watchers to grant: at most :data:`~tasks_core.policy.MAX_WATCHERS` given (a
    list of ``Owner`` of ``tenant``), without duplicates (in the order first given) or the
    owner; linear in their number.

    Raises:
        InvalidInput: not a list of ``Owner``, more than ``MAX_WATCHERS`` of them, or one of
            another tenant.
    """
    given: object = watchers
    if isinstance(given, (str, Owner)) or not isinstance(given, Iterable):
        raise InvalidInput("watchers must be a list of Owner(...)")
    listed = list(given)
    if len(listed) > MAX_WATCHERS:
        raise InvalidInput(f"watchers: at most {MAX_WATCHERS} per submit, not {len(listed)}")
    granted: dict[tuple[str, str], Owner] = {}
    for watcher in listed:
        if not isinstance(watcher, Owner):
            raise InvalidInput("watchers must be Owner(...) principals")
        check_principal(watcher)
        if watcher.tenant != tenant:
            raise InvalidInput("watchers must belong to the submitter's tenant")
        if watcher != owner:
            granted.setdefault(_identity(watcher), watcher)
    return tuple(granted.values())


def _identity(principal: Owner) -> tuple[str, str]:
    """What makes two ``Owner`` equal, hashable: de-duplicating by it is linear (``in`` on a
    list of models compares each pair, quadratic: 8,000 watchers took 37 s)."""
    return principal.tenant, principal.user_id
