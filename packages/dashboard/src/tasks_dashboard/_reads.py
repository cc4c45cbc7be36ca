"""What the pages show, read through the App's public calls as ``System``.

The store protocol pages tasks by id (``list(after=...)``) and counts nothing, so:
counts are the length of one page per status, capped at :data:`COUNT_CAP` (shown as
"1000+"); "newest first" uses the time in random ids (``"::"`` and 16 hex digits of
milliseconds × 65,536): :func:`newest` asks for the ids after an instant, narrowing or
widening that window until a page holds the newest tasks, then reverses it. Keyed ids
carry no time: :func:`keyed` lists them in id order. Every scan has a budget of rows.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tasks_core import App, Snapshot, System, TaskStatus

__all__ = ["COUNT_CAP", "Listing", "QueueRow", "WorkerRow", "keyed", "newest", "overview",
           "stamp_id", "workers"]

COUNT_CAP = 1000
"""Counts by status stop here (one page of ``list``): more reads as "1000+"."""
SCAN_BUDGET = 5000
"""At most this many tasks are read for one page of a filtered listing."""
RANDOM = "::"
AFTER_RANDOM = "::g"  # sorts after every random id ("::" and hex digits)
STATUSES = (TaskStatus.PENDING, TaskStatus.SCHEDULED, TaskStatus.CLAIMED, TaskStatus.RUNNING,
            TaskStatus.WAITING_INPUT, TaskStatus.COMPLETED, TaskStatus.FAILED,
            TaskStatus.CANCELLED)
TERMINAL = (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)


def stamp_id(instant_ms: int) -> str:
    """The smallest random id of tasks submitted at ``instant_ms`` (ms since the epoch)."""
    return f"{RANDOM}{max(0, instant_ms) << 16:016x}"


def _stamp_ms(task_id: str) -> int | None:
    """The submit instant (ms) a random id carries, else ``None``."""
    if not task_id.startswith(RANDOM) or len(task_id) < 18:
        return None
    try:
        return int(task_id[2:18], 16) >> 16
    except ValueError:
        return None


@dataclass
class QueueRow:
    """One queue of the queues page."""

    name: str
    counts: dict[str, int] = field(default_factory=dict)
    oldest_pending: datetime | None = None
    finished_last_hour: int = 0


@dataclass
class Overview:
    """The queues page: a row per queue, and which counts hit :data:`COUNT_CAP`."""

    queues: list[QueueRow]
    capped: set[str]
    throughput_capped: bool
    now: datetime


async def overview(app: App, authority: System, declared: Iterable[str] = ()) -> Overview:
    """Counts by status per queue, the oldest pending task's age and the tasks finished in
    the last hour (among the tasks submitted in the last 24 hours).

    Raises:
        StoreUnavailable: the store failed.
    """
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
    since = stamp_id(int((now - timedelta(days=1)).timestamp() * 1000))
    recent = await app.list(authority, status=TERMINAL, after=since, limit=COUNT_CAP)
    hour_ago = now - timedelta(hours=1)
    for task in recent.items:
        if task.finished_at is not None and task.finished_at >= hour_ago:
            rows.setdefault(task.queue, QueueRow(task.queue)).finished_last_hour += 1
    return Overview(sorted(rows.values(), key=lambda r: r.name), capped,
                    recent.next_after is not None, now)


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


async def _window(app: App, authority: System, statuses: list[TaskStatus] | None,
                  queue: str | None, lower: str, before: str | None, *, page: int,
                  budget: int) -> tuple[list[Snapshot], bool, int]:
    """The random-id tasks from ``lower`` up to ``before`` in id order, read ``page`` at a
    time: ``(tasks, complete, read)``; ``complete`` is false when ``budget`` ran out."""
    found: list[Snapshot] = []
    after: str | None = lower
    read = 0
    while read < budget:
        result = await app.list(authority, status=statuses, queue=queue, after=after,
                                limit=page)
        read += len(result.items)
        for task in result.items:
            if not task.id.startswith(RANDOM) or (before is not None and task.id >= before):
                return found, True, read
            found.append(task)
        if result.next_after is None:
            return found, True, read
        after = result.next_after
    return found, False, read


async def newest(app: App, authority: System, *, statuses: list[TaskStatus] | None = None,
                 queue: str | None = None, before: str | None = None, limit: int = 50,
                 keep: Filter | None = None) -> Listing:
    """The newest random-id tasks submitted before the id ``before``, newest first.

    Windows of submit instants are read backwards from ``before`` (or now) in id order:
    one that holds few enough tasks is taken whole and the next ends where it began; an
    empty one makes the next four times wider; one too full to read (more than ``page``
    tasks) gives the density of tasks there, from which the next window's start is
    estimated (bisected when the estimate leaves the bounds). ``keep`` filters what the
    store cannot (owner): then windows are read up to :data:`SCAN_BUDGET` tasks.

    Raises:
        StoreUnavailable: the store failed.
    """
    upper_ms = _stamp_ms(before) if before else None
    if upper_ms is None:
        upper_ms = int(datetime.now(UTC).timestamp() * 1000) + 60_000  # clock skew
    upper = before
    page, budget = (4 * limit, 4 * limit) if keep is None else (1000, SCAN_BUDGET)
    found: list[Snapshot] = []
    width, full = 10_000, None  # full: (stamp of the last task read, kept tasks per ms)
    scanned, lower_ms = 0, upper_ms
    for _ in range(40):
        if len(found) >= limit or lower_ms == 0 or scanned >= 4 * SCAN_BUDGET:
            break
        lower_ms = max(0, upper_ms - width) if full is None else _estimate(
            full, upper_ms, limit - len(found))
        stuck = full is not None and lower_ms <= full[0]  # page forward, whatever it costs
        tasks, complete, read = await _window(
            app, authority, statuses, queue, stamp_id(lower_ms), upper, page=page,
            budget=SCAN_BUDGET if stuck else budget)
        scanned += read
        kept = [t for t in tasks if keep is None or keep(t)]
        if complete:
            found += kept
            upper_ms, upper = lower_ms, stamp_id(lower_ms)
            if full is None and not tasks:
                width *= 4
        elif stuck:
            break
        else:
            last = _stamp_ms(tasks[-1].id) or lower_ms
            full = (last, len(kept) / max(1, last - lower_ms + 1))
    items = _page(found, limit)
    listing = Listing(items, None, scanned, exhausted=len(found) < limit and lower_ms > 0)
    if len(found) > limit:
        listing.next = items[-1].id
    elif lower_ms > 0:
        listing.next = upper
    return listing


def _estimate(full: tuple[int, float], upper_ms: int, wanted: int) -> int:
    """Where the next window starts: about twice ``wanted`` tasks below ``upper_ms`` at
    the density last seen, kept above the last task read (else bisected)."""
    last, rate = full
    guess = upper_ms - int(2 * wanted / rate) if rate > 0 else last
    if last < guess < upper_ms:
        return guess
    return max(last, (last + upper_ms) // 2)


def _page(tasks: list[Snapshot], limit: int) -> list[Snapshot]:
    return sorted(tasks, key=lambda t: t.id, reverse=True)[:limit]


async def keyed(app: App, authority: System, *, statuses: list[TaskStatus] | None = None,
                queue: str | None = None, after: str | None = None, limit: int = 50,
                keep: Filter | None = None) -> Listing:
    """Tasks with keyed ids (every id but the random ones) in id order, after ``after``,
    the random range skipped; at most :data:`SCAN_BUDGET` tasks read.

    Raises:
        StoreUnavailable: the store failed.
    """
    found: list[Snapshot] = []
    scanned = 0
    cursor = after
    while scanned < SCAN_BUDGET:
        if cursor is not None and cursor.startswith(RANDOM) and cursor < AFTER_RANDOM:
            cursor = AFTER_RANDOM
        result = await app.list(authority, status=statuses, queue=queue, after=cursor,
                                limit=min(1000, max(limit * 2, 100)))
        scanned += len(result.items)
        for task in result.items:
            cursor = task.id
            if task.id.startswith(RANDOM):
                continue
            if keep is None or keep(task):
                found.append(task)
                if len(found) == limit:
                    return Listing(found, task.id, scanned)
        if result.next_after is None:
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
