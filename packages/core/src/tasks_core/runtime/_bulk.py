"""Bulk submit: the checked items of ``submit_many`` (validated by the App) decided as
``submit`` decides each, in order. With capability ``batch_create`` the new tasks are one
``create_many``: one atomic step, all or nothing, capacity held for the batch as a whole.
A keyed id that is taken joins or re-runs its task as ``submit`` would; those writes (and
the joins of an id given twice) come after the creates, each on its own. Whom a taken id
lets join is checked before the creates, so such a refusal writes nothing. A race (an id
taken after it was read) is decided again. Without the capability: a loop of ``submit``,
in order, every taken key's join checked first — a store's refusal stops it with the
earlier items written. A capacity refusal of a re-run or of a loop's item names the item
and carries what the batch submitted (``CapacityExceeded.stored``). An id given again
joins the task its first item made (the batch's own outcome, not a new read), checked
before any write inside the application's transaction (a grant is refused there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasks_core import rules
from tasks_core.authority import Authority
from tasks_core.definitions import Submitted
from tasks_core.errors import (
    AuthorizationError,
    CapacityExceeded,
    InvalidInput,
    StoreUnavailable,
    TaskExists,
    TaskNotFound,
    Unavailable,
)
from tasks_core.models import NewTask, Snapshot
from tasks_core.policy import Limits, Policy
from tasks_core.runtime._submit import (
    MAX_RACES,
    as_read,
    check_join,
    check_owner_runs,
    submit,
)
from tasks_core.store import TaskStore

__all__ = ["submit_many"]

Item = tuple[NewTask, bool]
"""A checked item: the task to create and whether its id comes from a key."""


async def submit_many(
    store: TaskStore,
    policy: Policy,
    limits: Limits,
    items: Sequence[Item],
    authority: Authority,
    *,
    transaction: Any = None,
) -> list[Submitted]:
    """Submit every item (module docstring); the outcomes in the order of ``items``.

    Raises:
        AuthorizationError: joining a task the submitter may not join (the message names
            the item: ``item 1: …``).
        CapacityExceeded: a store capacity or ``max_runs_per_owner`` for the batch as a
            whole; nothing written.
        TaskExists: a random id is taken; nothing written.
        StoreUnavailable: the store failed, or the batch lost ``MAX_RACES`` races.
    """
    if not items:
        return []
    first: dict[str, int] = {}
    for index, (new, _) in enumerate(items):
        first.setdefault(new.id, index)
    owners = {new.owner for new, _ in items}
    for owner in owners:
        ids = {new.id for new, _ in items if new.owner == owner}
        await check_owner_runs(store, limits, owner, items[0][0].tenant, ids)
    if transaction is not None:
        await _check_repeats(store, policy, items, authority, first)
    batch = list(first.values())
    taken: dict[int, Submitted | Snapshot | None] = {}
    if store.capabilities.batch_create:
        taken = await _create_batch(store, policy, items, authority, batch, transaction)
    else:  # the loop: every join checked before its first write
        taken.update(await _joins_checked(store, policy, items, authority, batch, {},
                                          transaction))
    results: list[Submitted] = []
    for index, (new, keyed) in enumerate(items):
        done = taken.get(index)
        if isinstance(done, Submitted):
            results.append(done)
            continue
        if first[new.id] != index:  # an id again: it joins the batch's own task
            done = results[first[new.id]].snapshot
        try:
            results.append(await submit(store, policy, limits, new, authority, keyed=keyed,
                                        transaction=transaction, known=done))
        except (AuthorizationError, InvalidInput, Unavailable) as exc:
            raise refused(index, exc) from None
        except CapacityExceeded as exc:  # the batch's creates (and what came before) stay
            stored = {i: s for i, s in enumerate(results)}
            stored.update((i, s) for i, s in taken.items() if isinstance(s, Submitted))
            raise CapacityExceeded(exc.limit, retryable=exc.retryable, item=index,
                                   stored=stored) from None
    return results


async def _create_batch(
    store: TaskStore,
    policy: Policy,
    items: Sequence[Item],
    authority: Authority,
    batch: list[int],
    transaction: Any,
) -> dict[int, Submitted | Snapshot | None]:
    """Create the items at ``batch`` (indexes of distinct ids) in one ``create_many``,
    less those whose id is taken. Every other index maps to ``None`` (an id given
    again: decided after) or to the task that holds its id (joined or re-run after).

    Raises:
        AuthorizationError, TaskExists, CapacityExceeded, StoreUnavailable: as
            :func:`submit_many`; nothing written.
    """
    chosen = set(batch)
    outcome: dict[int, Submitted | Snapshot | None] = {
        index: None for index in range(len(items)) if index not in chosen}
    probed = False
    for _ in range(len(batch) + MAX_RACES):
        left = [index for index in batch if index not in outcome]
        if not left:
            return outcome
        try:
            created = await _create_many(store, [items[i][0] for i in left], transaction)
        except TaskExists as exc:
            index = next((i for i in left if items[i][0].id == exc.current.id), None)
            if index is None or not items[index][1]:
                raise  # a random id taken (or a store naming another id): as submit
            known = {i: t for i, t in outcome.items() if isinstance(t, Snapshot)}
            known[index] = exc.current
            # every keyed id that is taken, read once
            outcome.update(await _joins_checked(store, policy, items, authority,
                                                [] if probed else left, known, transaction))
            probed = True
            continue
        for index, snapshot in zip(left, created, strict=True):
            outcome[index] = Submitted(snapshot.id, snapshot.run_id, "created", snapshot)
        return outcome
    raise StoreUnavailable("submit_many kept losing races; try again")


async def _joins_checked(
    store: TaskStore, policy: Policy, items: Sequence[Item], authority: Authority,
    indexes: list[int], known: dict[int, Snapshot], transaction: Any,
) -> dict[int, Snapshot]:
    """``known`` and the tasks read at the other keyed ids of ``indexes`` (an expired one
    reads as free: its create's refusal names it), each join checked.

    Raises:
        AuthorizationError, Unavailable: a join the submitter may not make, naming the item.
    """
    found = dict(known)
    for index in indexes:
        new, keyed = items[index]
        if keyed and index not in found:
            try:
                found[index] = await store.get(new.id, tenant=None)
            except TaskNotFound:
                continue
    now = await store.now()
    for index, current in found.items():
        try:
            check_join(policy, items[index][0], authority, current, now,
                       in_transaction=transaction is not None)
        except (AuthorizationError, Unavailable) as exc:
            raise refused(index, exc) from None
    return found


async def _check_repeats(
    store: TaskStore, policy: Policy, items: Sequence[Item], authority: Authority,
    first: dict[str, int],
) -> None:
    """Each item whose id an earlier item gives, checked as a join of the task that earlier
    item makes (as made now) inside the application's transaction; nothing written.

    Raises:
        Unavailable, AuthorizationError: a join ``check_join`` refuses, naming both items.
    """
    repeats = [index for index, (new, _) in enumerate(items) if first[new.id] != index]
    if not repeats:
        return
    now = await store.now()
    for index in repeats:
        new = items[index][0]
        made = rules.new_snapshot(items[first[new.id]][0], now)
        try:
            check_join(policy, new, authority, made, now, in_transaction=True)
        except AuthorizationError as exc:
            raise refused(index, exc) from None
        except Unavailable:
            raise Unavailable(
                f"item {index}: its key is item {first[new.id]}'s, and joining that task "
                f"with watchers item {first[new.id]} does not name cannot be written inside "
                "your transaction: name them on the first item, or submit it outside the "
                "transaction") from None


async def _create_many(
    store: TaskStore, news: list[NewTask], transaction: Any
) -> list[Snapshot]:
    """``store.create_many``, naming ``transaction`` only when there is one; the tasks as
    a read right after shows them (``_submit.as_read``)."""
    if transaction is None:
        return [as_read(s) for s in await store.create_many(news)]
    return [as_read(s) for s in await store.create_many(news, transaction=transaction)]


def refused(index: int, exc: Exception) -> Exception:
    """The refusal of item ``index``: ``exc``'s type, its message naming the item."""
    return type(exc)(f"item {index}: {exc}")
