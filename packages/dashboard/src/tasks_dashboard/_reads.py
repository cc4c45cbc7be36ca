"""What the pages show, read as ``System`` through the App and its store.

Counts: a store with the capability ``counts`` counts tasks by queue and status exactly
(:func:`overview`); without it a count is the length of one ``list`` page per status,
capped at :data:`COUNT_CAP` (shown as "1000+"). "Newest first" uses the time in random ids
(:mod:`tasks_core.random_ids`): :func:`newest` reads windows of ids
backwards from an instant, narrowing one that holds more than a page and widening after
one that holds few, then reverses what it found. Keyed ids and periodic ticks carry no
time: :func:`keyed` lists them in id order. An owner filter is the store's listing by
principal (its member index), kept to the tasks the user owns. Every scan has a budget of
rows.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tasks_core import App, Owner, Snapshot, System, TaskQuery, TaskStatus
from tasks_core.authority import SEPARATOR
from tasks_core.periodic import TICK_PREFIX
from tasks_core.random_ids import random_id_floor, random_id_instant

__all__ = ["COUNT_CAP", "Listing", "QueueRow", "WorkerRow", "keyed", "newest", "overview",
           "workers"]

COUNT_CAP = 1000
"""Without counts in the store, counts by status stop here (one page of ``list``): more
reads as "1000+"."""
SCAN_BUDGET = 5000
"""At most this many tasks are read for one page of a filtered listing."""
OLDEST_PAGE = 100
"""The pending tasks of a queue read (in id order) for its oldest pending age."""
RECENT_PAGE = 100
"""The newest finished tasks (of every finished status together) read for the throughput
of the last hour."""
STATUSES = (TaskStatus.PENDING, TaskStatus.SCHEDULED, TaskStatus.CLAIMED, TaskStatus.RUNNING,
            TaskStatus.WAITING_INPUT, TaskStatus.COMPLETED, TaskStatus.FAILED,
            TaskStatus.CANCELLED)
TERMINAL = (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)


def _random(task_id: str) -> bool:
    """Whether ``task_id`` is a random id (made without a key)."""
    return random_id_instant(task_id) is not None


@dataclass
class QueueRow:
    """One queue of the queues page."""

    name: str
    counts: dict[str, int] = field(default_factory=dict)
    oldest_pending: datetime | None = None
    finished_last_hour: int = 0
    finished_capped: bool = False
    """Whether ``finished_last_hour`` is "at least": this queue's own read hit its page."""


@dataclass
class Overview:
    """The queues page: a row per queue, whether the counts are exact, which counts hit
    :data:`COUNT_CAP` (never when exact), whether any row's throughput read hit its page
    (each row says whether its own did: ``finished_capped``)."""

    queues: list[QueueRow]
    capped: set[str]
    throughput_capped: bool
    now: datetime
    exact: bool = False


async def counted(app: App, authority: System) -> dict[tuple[str, TaskStatus], int] | None:
    """The store's exact counts by queue and status in ``authority``'s tenant, or ``None``
    when the store has no capability ``counts``.

    Raises:
        StoreUnavailable: the store failed.
    """
    store = await app.open()
    if not store.capabilities.counts:
        return None
    return await store.counts(tenant=authority.tenant)


async def overview(app: App, authority: System, declared: Iterable[str] = ()) -> Overview:
    """Counts by status per queue, the oldest pending task's age and the tasks finished in
    the last hour: exact counts when the store counts (:func:`counted`), else capped. The
    tasks finished in the last hour are the ones submitted without a key (no store counts
    by finish time, and keyed ids carry no time to find the recent ones by), counted among
    the :data:`RECENT_PAGE` newest finished ones (one listing of every finished status).
    When the oldest of them finished within the hour too, each queue with finished tasks
    is read on its own the same way, and a queue is capped (``finished_capped``: "at
    least") only when the oldest of its own page finished within the hour.

    Raises:
        StoreUnavailable: the store failed.
    """
    counts = await counted(app, authority)
    if counts is None:
        return await _capped_overview(app, authority, declared)
    now = datetime.now(UTC)
    rows: dict[str, QueueRow] = {name: QueueRow(name) for name in declared}
    for (queue, status), number in counts.items():
        rows.setdefault(queue, QueueRow(queue)).counts[status.value] = number
    waiting = [q for q, row in rows.items() if row.counts.get(TaskStatus.PENDING.value)]
    pages = await asyncio.gather(*(_list(app, _query(
        authority, [TaskStatus.PENDING], q, None, None, OLDEST_PAGE)) for q in waiting))
    for queue, (page, _) in zip(waiting, pages, strict=True):
        rows[queue].oldest_pending = min((t.created_at for t in page), default=None)
    finished = sorted({s for (_, s), n in counts.items() if s in TERMINAL and n})

    async def recent(queue: str | None) -> Listing:
        total = sum(n for (q, s), n in counts.items()
                    if s in finished and queue in (None, q))
        return await newest(app, authority, statuses=finished, queue=queue,
                            limit=RECENT_PAGE, total=total)

    hour_ago = now - timedelta(hours=1)
    listing = await recent(None)
    reads: list[tuple[str | None, Listing]] = [(None, listing)]
    if _within(listing.items, listing.next is not None, hour_ago):  # each queue on its own
        queues = sorted({q for (q, s), n in counts.items() if s in finished and n})
        listings = await asyncio.gather(*(recent(q) for q in queues))
        reads = [(q, one) for q, one in zip(queues, listings, strict=True)]
    for of_queue, read in reads:
        _tally(rows, read.items, hour_ago, of_queue, _within(
            read.items, read.next is not None, hour_ago))
    return Overview(sorted(rows.values(), key=lambda r: r.name), set(),
                    any(r.finished_capped for r in rows.values()), now, exact=True)


def _within(items: list[Snapshot], more: bool, hour_ago: datetime) -> bool:
    """Whether a page of the newest finished tasks (``more``: others follow) may have left
    out some that finished within the hour: the oldest of it did."""
    oldest = items[-1].finished_at if items else None
    return more and oldest is not None and oldest >= hour_ago


def _tally(rows: dict[str, QueueRow], tasks: list[Snapshot], hour_ago: datetime,
           queue: str | None, capped: bool) -> None:
    """Count ``tasks`` (random ids only) that finished within the hour into their rows;
    ``queue``'s row, when the page was of one queue, is ``capped`` or not."""
    for task in tasks:  # keyed ids carry no time: listed, not counted
        if _random(task.id) and task.finished_at is not None and task.finished_at >= hour_ago:
            rows.setdefault(task.queue, QueueRow(task.queue)).finished_last_hour += 1
    if queue is not None:
        rows.setdefault(queue, QueueRow(queue)).finished_capped = capped


async def _capped_overview(app: App, authority: System, declared: Iterable[str]) -> Overview:
    """:func:`overview` for a store without counts: one page of ``list`` per status."""
    now = datetime.now(UTC)
    rows: dict[str, QueueRow] = {name: QueueRow(name) for name in declared}
    capped: set[str] = set()
    pages = await asyncio.gather(*(app.list(authority, status=status, limit=COUNT_CAP)
                                   for status in STATUSES))  # the store's pool overlaps them
    for status, page in zip(STATUSES, pages, strict=True):
        if page.next_after is not None:
            capped.add(status.value)
        for task in page.items:
            row = rows.setdefault(task.queue, QueueRow(task.queue))
            row.counts[status.value] = row.counts.get(status.value, 0) + 1
            if status is TaskStatus.PENDING and (
                    row.oldest_pending is None or task.created_at < row.oldest_pending):
                row.oldest_pending = task.created_at
    since = random_id_floor(int((now - timedelta(days=1)).timestamp() * 1000))
    hour_ago = now - timedelta(hours=1)
    recent = await app.list(authority, status=TERMINAL, after=since, limit=COUNT_CAP)
    if recent.next_after is None:
        _tally(rows, recent.items, hour_ago, None, False)
    else:  # past one page: each queue on its own, capped when its own page is full
        queues = sorted(rows)
        pages = await asyncio.gather(*(app.list(
            authority, status=TERMINAL, queue=q, after=since, limit=COUNT_CAP) for q in queues))
        for queue, page in zip(queues, pages, strict=True):
            _tally(rows, page.items, hour_ago, queue, page.next_after is not None)
    return Overview(sorted(rows.values(), key=lambda r: r.name), capped,
                    any(r.finished_capped for r in rows.values()), now)


def _query(authority: System, statuses: list[TaskStatus] | None, queue: str | None,
           principal: Owner | None, after: str | None, limit: int) -> TaskQuery:
    return TaskQuery(tenant=authority.tenant, principal=principal, queue=queue, after=after,
                     limit=limit, statuses=None if statuses is None else frozenset(statuses))


async def _list(app: App, query: TaskQuery) -> tuple[list[Snapshot], str | None]:
    """One page of the store's listing and the cursor of the next (``None``: a short
    page, the last)."""
    items = await (await app.open()).list(query)
    return items, items[-1].id if len(items) >= query.limit else None


@dataclass
class Listing:
    """One page of tasks: ``items`` newest first (or in id order for keyed tasks),
    ``next`` the cursor of the following page (``None``: no more), ``scanned`` how many
    tasks were read for it, ``exhausted`` whether the budget ended the scan early."""

    items: list[Snapshot]
    next: str | None
    scanned: int
    exhausted: bool = False


Filter = Callable[[Snapshot], bool]


async def _window(app: App, base: TaskQuery, lower: str, before: str | None, *, page: int,
                  budget: int) -> tuple[list[Snapshot], bool, int]:
    """The random-id tasks of ``base`` from ``lower`` up to ``before`` in id order, read
    ``page`` at a time: ``(tasks, complete, read)``; ``complete`` is false when ``budget``
    ran out."""
    found: list[Snapshot] = []
    after: str | None = lower
    read = 0
    while read < budget:
        items, more = await _list(app, base.model_copy(update={"after": after, "limit": page}))
        read += len(items)
        for task in items:
            if not _random(task.id) or (before is not None and task.id >= before):
                return found, True, read
            found.append(task)
        if more is None:
            return found, True, read
        after = more
    return found, False, read


async def _first(app: App, base: TaskQuery, lower_ms: int, before: str | None) -> int | None:
    """The submit instant of the oldest random-id task of ``base`` at or after
    ``lower_ms`` and before the id ``before``, else ``None`` (a read of one task)."""
    items, _ = await _list(app, base.model_copy(update={"after": random_id_floor(lower_ms),
                                                        "limit": 1}))
    if not items or (before is not None and items[0].id >= before):
        return None
    return random_id_instant(items[0].id)


async def _edge(app: App, base: TaskQuery, upper_ms: int, upper: str | None,
                width: int) -> int | None:
    """An instant at most ``width`` ms above the newest random-id task of ``base`` before
    the id ``upper`` (instant ``upper_ms``), with no such task at or after it; ``None``
    when there is none: reads of one task each, back from ``upper_ms`` by steps four times
    wider each (from ``width``) until one finds a task, then halving the span between that
    task and the last step that found none down to ``width``."""
    empty_from, step = upper_ms, width
    while True:
        lower = max(0, upper_ms - step)
        found = await _first(app, base, lower, upper)
        if found is not None:
            break
        if lower == 0:
            return None
        empty_from, step = lower, step * 4
    return await _closer(app, base, found, empty_from, upper, width)


async def _closer(app: App, base: TaskQuery, found: int, empty_from: int,
                  upper: str | None, width: int) -> int:
    """An instant at most ``width`` ms above the newest random-id task of ``base`` before
    the id ``upper``, given one such task at ``found`` and none from ``empty_from`` on:
    reads of one task each, halving the span between them."""
    while empty_from - found > width:
        middle = (found + empty_from) // 2
        later = await _first(app, base, middle, upper)
        if later is None:
            empty_from = middle
        else:
            found = later
    return empty_from


async def newest(app: App, authority: System, *, statuses: list[TaskStatus] | None = None,
                 queue: str | None = None, principal: Owner | None = None,
                 before: str | None = None, limit: int = 50, keep: Filter | None = None,
                 total: int | None = None) -> Listing:
    """The newest random-id tasks submitted before the id ``before``, newest first.

    The store lists in id order only, so the page is found from its top: the newest task
    below ``before`` (:func:`_edge`), then a window of submit instants ending there, read
    in id order: taken whole when it holds at most a trial read (four pages), else
    narrowed at the density of the tasks read, its end brought down to within the new
    width above the newest task (:func:`_closer`), down to one millisecond, then read
    whole within the budget. Short of ``limit``, the next window ends where one taken
    began, wide enough for half a trial read at the density found there (at most four
    times wider); after an empty one the newest task below is looked for again. ``keep``
    filters what the store cannot; ``total`` (the matching tasks, when known, keyed ones
    included: at least as many as the random-id ones) ends the search once that many are
    found, and when they fit in four pages they are read at once (the database then plans
    for all of them: the index of a rare status, not the id order). A search that ends
    with exactly ``limit`` tasks asks whether an older one exists (a read of one task), so
    that the last page has no "next" to an empty one.

    Raises:
        StoreUnavailable: the store failed.
    """
    upper_ms = random_id_instant(before) if before else None
    if upper_ms is None:
        upper_ms = int(datetime.now(UTC).timestamp() * 1000) + 60_000  # clock skew
    upper = before
    base = _query(authority, statuses, queue, principal, None, 1)
    page = 4 * limit if keep is None else 1000  # read at once; a whole millisecond's chunk
    trial = 4 * limit  # a window holding more is narrowed
    if total is not None and total <= page and keep is None:  # one read of them all
        if total == 0:
            return Listing([], None, 0)
        items, _ = await _list(app, base.model_copy(update={"limit": total}))
        kept = [t for t in items if _random(t.id) and (upper is None or t.id < upper)]
        listing = Listing(_page(kept, limit), None, len(items))
        listing.next = listing.items[-1].id if len(kept) > limit else None
        return listing
    found: list[Snapshot] = []
    scanned, done, width = 0, False, 50
    anchor: int | None = None  # the end of the next window (an instant), when known
    for _ in range(60):
        if len(found) >= limit or scanned >= 4 * SCAN_BUDGET or (
                total is not None and len(found) >= total):
            break
        if anchor is None:  # look for the newest task below first
            anchor = await _edge(app, base, upper_ms, upper, width)
            if anchor is None:
                done = True
                break
        lower_ms = max(0, anchor - width)
        whole = anchor - lower_ms <= 1
        tasks, complete, read = await _window(
            app, base, random_id_floor(lower_ms), upper, page=page if whole else trial,
            budget=SCAN_BUDGET if whole else trial)
        scanned += read
        if complete:
            found += [t for t in tasks if keep is None or keep(t)]
            upper_ms, upper = lower_ms, random_id_floor(lower_ms)
            done = lower_ms == 0
            anchor = lower_ms if tasks else None
            width = max(1, min(width * 4, trial * width // (2 * len(tasks) or 1)))
        elif whole:
            break  # one millisecond holds more than the budget
        else:  # narrower, its end brought down as close to the newest task
            first = random_id_instant(tasks[0].id) or lower_ms
            last = random_id_instant(tasks[-1].id) or lower_ms
            rate = len(tasks) / max(1, last - first + 1)  # tasks per ms where they were read
            width = max(1, min(int(trial / 2 / rate), width // 2))
            anchor = await _closer(app, base, last, anchor, upper, width)
        if done:
            break
    items = _page(found, limit)
    done = done or (total is not None and len(found) >= total)
    if not done and len(found) == limit:  # a whole page: is any task older than it?
        done = await _first(app, base, 0, items[-1].id) is None
    listing = Listing(items, None, scanned, exhausted=len(found) < limit and not done)
    if len(found) > limit:
        listing.next = items[-1].id
    elif not done:
        listing.next = upper
    return listing


def _page(tasks: list[Snapshot], limit: int) -> list[Snapshot]:
    return sorted(tasks, key=lambda t: t.id, reverse=True)[:limit]


async def keyed(app: App, authority: System, *, statuses: list[TaskStatus] | None = None,
                queue: str | None = None, principal: Owner | None = None,
                after: str | None = None, limit: int = 50,
                keep: Filter | None = None) -> Listing:
    """Tasks with keyed ids and periodic ticks (every id but the random ones) in id order,
    after ``after``; the ids below :data:`TICK_PREFIX` that begin with ``"::"`` (random
    ones, made before the year 2400) are skipped in one step, any other random id as it
    is read; at most :data:`SCAN_BUDGET` tasks read. A page has a next one only when a task
    past it matches (the listing reads on to one more).

    Raises:
        StoreUnavailable: the store failed.
    """
    found: list[Snapshot] = []
    scanned = 0
    cursor = after
    while scanned < SCAN_BUDGET:
        if cursor is not None and SEPARATOR <= cursor < TICK_PREFIX:  # random ids
            cursor = TICK_PREFIX
        items, more = await _list(app, _query(authority, statuses, queue, principal, cursor,
                                              min(1000, max(limit * 2, 100))))
        scanned += len(items)
        for task in items:
            cursor = task.id
            if _random(task.id):
                continue
            if keep is None or keep(task):
                found.append(task)
                if len(found) > limit:  # one more than a page: the page has a next one
                    return Listing(found[:limit], found[limit - 1].id, scanned)
        if more is None:
            return Listing(found, None, scanned)
    return Listing(found, cursor, scanned, exhausted=True)


@dataclass
class WorkerRow:
    """A worker as its live leases show it."""

    worker_id: str
    tasks: list[Snapshot] = field(default_factory=list)
    lease_expires: datetime | None = None
    last_heartbeat: datetime | None = None


async def workers(app: App, authority: System) -> tuple[list[WorkerRow], bool]:
    """The workers holding live leases (running and claimed tasks), by worker id, with
    their last heartbeat (the latest write to one of their leased tasks: a renewal or a
    progress report); whether the scan stopped at :data:`SCAN_BUDGET`.

    Raises:
        StoreUnavailable: the store failed.
    """
    rows: dict[str, WorkerRow] = defaultdict(lambda: WorkerRow(""))
    after, read = None, 0
    while True:
        page = await app.list(authority, status=[TaskStatus.RUNNING, TaskStatus.CLAIMED],
                              after=after, limit=1000)
        read += len(page.items)
        for task in page.items:
            if task.claim is None:
                continue
            row = rows[task.claim.worker_id]
            row.worker_id = task.claim.worker_id
            row.tasks.append(task)
            if row.lease_expires is None or task.claim.expires_at > row.lease_expires:
                row.lease_expires = task.claim.expires_at
            if row.last_heartbeat is None or task.updated_at > row.last_heartbeat:
                row.last_heartbeat = task.updated_at
        if page.next_after is None or read >= SCAN_BUDGET:
            return sorted(rows.values(), key=lambda r: r.worker_id), page.next_after is not None
        after = page.next_after
