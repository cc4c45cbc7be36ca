"""The ``tasks`` commands that read: ``ls`` (newest first), ``show``, ``workers``, and
following a task (``show --follow``, ``submit --wait``), which says once when no live
worker serves its queue.

Reading never creates a store: ``cli.main`` opens it with every store's ``create=False``
(a missing SQLite file, an empty database or namespace is refused, never given the tasks
schema). ``ls``
orders by creation, newest first: the store lists by id, so it reads up to ``--scan``
matching tasks, sorts them by ``(created_at, id)`` descending and shows one page.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from rich.console import Console
from rich.live import Live
from rich.table import Table

from tasks_core.authority import Authority
from tasks_core.cli._options import MAX_PAGE
from tasks_core.cli._render import Bars, cell, one_line, plain, tasks_table
from tasks_core.errors import InvalidInput
from tasks_core.models import Snapshot, TaskStatus
from tasks_core.runtime.app import App

__all__ = ["NO_WORKER_AFTER_S", "WorkerRow", "follow", "list_newest_first", "live_leases",
           "worker_rows", "workers_table"]

NO_WORKER_AFTER_S = 5.0
"""How long a followed task waits, available and unclaimed, before the hint is printed."""
HINT_POLL_S = 1.0
"""How often a followed task is re-read for the hint."""
LEASED = (TaskStatus.RUNNING, TaskStatus.CLAIMED, TaskStatus.WAITING_INPUT)
"""The statuses a task holding a live lease reads."""


async def list_newest_first(
    app: App, authority: Authority, args: argparse.Namespace
) -> tuple[list[Snapshot], str | None, bool]:
    """One page of ``tasks ls``: ``(tasks, next --after, scan cut short)``. Reads at
    most ``args.scan`` matching tasks (in the store's id order: pages of at most
    ``MAX_PAGE``, none larger than what is left of the budget), newest first from there;
    the scan is cut short when it stopped at ``args.scan`` with more to read.
    ``args.after`` is the last task of the previous page. ``args.limit`` and
    ``args.scan`` are checked sizes (``_options``).

    Raises:
        InvalidInput: ``--after`` names no task among those listed.
    """
    found: list[Snapshot] = []
    after: str | None = None
    left = args.scan
    while True:
        size = min(MAX_PAGE, left)
        page = await app.list(authority, status=args.status or None, queue=args.queue,
                              after=after, limit=size)
        found.extend(page.items)
        left -= size  # a page with a next one was full: it read ``size`` tasks
        if page.next_after is None:
            capped = False
            break
        if left <= 0:
            capped = True
            break
        after = page.next_after
    found.sort(key=lambda s: (s.created_at, s.id), reverse=True)
    start = 0
    if args.after is not None:
        start = next((i + 1 for i, s in enumerate(found) if s.id == args.after), -1)
        if start < 0:
            raise InvalidInput(f"--after {args.after!r} is not among the listed tasks")
    rows = found[start:start + args.limit]
    more = len(found) > start + args.limit
    return rows, rows[-1].id if more and rows else None, capped


async def live_leases(app: App, authority: Authority, queue: str | None = None,
                      *, most: int = 10_000) -> tuple[list[Snapshot], datetime]:
    """The tasks ``authority`` can list that hold a live lease (of ``queue``), at least
    ``most`` when there are (whole pages are read), and the store's ``now`` they were
    judged at: each page is judged at a ``now`` read once it has answered, so that no
    heartbeat written while it listed lies ahead of the ``now`` returned.

    Raises:
        StoreUnavailable: the store failed.
    """
    store = await app.open()
    held: list[Snapshot] = []
    after: str | None = None
    while True:
        page = await app.list(authority, status=LEASED, queue=queue, after=after,
                              limit=MAX_PAGE)
        now = await store.now()
        held.extend(s for s in page.items if s.lease_live(now))
        if len(held) >= most or page.next_after is None:
            return held, now
        after = page.next_after


class WorkerRow(NamedTuple):
    """One worker of ``tasks workers``: its id, its leased tasks by status (running, held,
    waiting for input), their queues, its latest lease expiry, and its last heartbeat
    (that expiry less ``--lease``; ``None`` without it)."""

    worker_id: str
    running: int
    held: int
    waiting: int
    queues: list[str]
    lease_expires: datetime
    last_heartbeat: datetime | None


def worker_rows(leased: Iterable[Snapshot], lease: float | None) -> list[WorkerRow]:
    """The workers holding the live leases of ``leased``, busiest first; ``lease``: the
    checked ``--lease`` (``_options``), or ``None``."""
    by_worker: dict[str, list[Snapshot]] = {}
    for snapshot in leased:
        assert snapshot.claim is not None
        by_worker.setdefault(snapshot.claim.worker_id, []).append(snapshot)
    rows = []
    for worker, tasks in sorted(by_worker.items(), key=lambda item: (-len(item[1]), item[0])):
        expiry = max(s.claim.expires_at for s in tasks if s.claim is not None)
        running, held, waiting = (sum(1 for s in tasks if s.status == status)
                                  for status in LEASED)
        rows.append(WorkerRow(
            worker, running, held, waiting, sorted({s.queue for s in tasks}), expiry,
            None if lease is None else expiry - timedelta(seconds=lease)))
    return rows


def workers_table(rows: Sequence[WorkerRow], now: datetime) -> Table:
    """``tasks workers``: one row per worker (:func:`worker_rows`); its last heartbeat
    when known, else its latest lease expiry."""
    heard = any(row.last_heartbeat is not None for row in rows)
    table = Table(header_style="bold")
    for column in ("WORKER", "RUNNING", "HELD", "WAITING", "QUEUES",
                   "LAST HEARTBEAT" if heard else "LEASE EXPIRES"):
        table.add_column(column, no_wrap=True)
    for row in rows:
        seen = row.last_heartbeat or row.lease_expires
        ago = (now - seen).total_seconds()
        when = f"{seen:%Y-%m-%d %H:%M:%S} UTC ({abs(ago):.0f}s {'ago' if ago >= 0 else 'ahead'})"
        table.add_row(cell(row.worker_id), str(row.running), str(row.held), str(row.waiting),
                      cell(", ".join(row.queues)), when)
    return table


async def follow(app: App, task_id: str, authority: Authority, console: Console, *,
                 hint: bool = False) -> int:
    """Draw the task's progress until it ends: 0 when it completed, else 1; a task that
    ended with an error gets a last line holding the error whole (the bar cuts it). ``hint``:
    say once when it stays available and unclaimed for ``NO_WORKER_AFTER_S`` while no
    task of its queue holds a live lease (no live worker serves the queue)."""
    bars = Bars(console)
    with Live(bars.renderable(), console=console, refresh_per_second=10,
              transient=False) as live:
        watcher = (asyncio.create_task(_hint_unserved(app, task_id, authority, live.console))
                   if hint else None)
        try:
            async for snapshot in app.watch(task_id, authority, poll_interval=0.2):
                bars.update(snapshot)
                live.update(bars.renderable(), refresh=True)
                last = snapshot
        finally:
            if watcher is not None:
                watcher.cancel()
    if not console.is_terminal:
        console.line()  # off a terminal the last frame ends without one
    if last.error is not None:  # the bar cuts it; a log or CI job needs it whole
        one_line(console, f"{plain(last.id)}: {last.status.value}: "
                          f"{plain(last.error.type)}: {plain(last.error.message)}")
    return 0 if last.status == "completed" else 1


async def _hint_unserved(app: App, task_id: str, authority: Authority,
                         console: Console) -> None:
    """Print the no-live-worker hint once, when it is true (see :func:`follow`)."""
    since: float | None = None
    loop = asyncio.get_running_loop()
    while True:
        snapshot = await app.get(task_id, authority)
        if snapshot.terminal:
            return
        if snapshot.status != TaskStatus.PENDING:
            since = None
        elif since is None:
            since = loop.time()
        elif loop.time() - since >= NO_WORKER_AFTER_S:
            # read as the caller reads (as ``tasks workers --user``): a lease on a task
            # the caller cannot see must not show through the hint
            leased, _ = await live_leases(app, authority, snapshot.queue, most=1)
            if not leased:
                one_line(console, f"[yellow]no live worker serves queue "
                                  f"{plain(repr(snapshot.queue))}: the task has waited "
                                  f"{NO_WORKER_AFTER_S:g}s unclaimed and no task of the "
                                  "queue that you can see holds a lease. Start one on this "
                                  f"store:[/] tasks worker APP --queues {plain(snapshot.queue)}")
                return
            since = loop.time()
        await asyncio.sleep(HINT_POLL_S)


def print_ls(console: Console, rows: list[Snapshot], next_after: str | None, capped: bool,
             *, wide: bool, scan: int) -> None:
    """Print a page of ``tasks ls`` and how to get the next one."""
    console.print(tasks_table(rows, wide=wide, width=console.width))
    if next_after:
        one_line(console, f"more: tasks ls … --after {plain(repr(next_after))}")
    if capped:
        one_line(console, f"[yellow]read the first {scan} matching tasks by id only: "
                          "narrow with --status/--queue or raise --scan[/]")
