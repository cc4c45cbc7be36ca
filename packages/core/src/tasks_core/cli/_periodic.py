"""``tasks periodic --app MODULE:ATTR``: the app's schedules, their last and next ticks.

Rules: it only reads (a tick is created by workers, never here), as ``System`` (a tick's
task has no owner); every instant is on the store's clock: the last tick is the latest at
or before the store's ``now``, shown with whether its task exists and its status, and the
next is the first after it. docs/cli.md describes the columns.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tasks_core.authority import System
from tasks_core.cli._render import (
    cell,
    instant_json,
    json_row,
    one_line,
    plain,
    print_json,
    status_text,
)
from tasks_core.errors import TaskNotFound
from tasks_core.models import TaskStatus
from tasks_core.periodic import Schedule
from tasks_core.runtime.app import App

__all__ = ["add_periodic_parser", "cmd_periodic", "schedules_table"]


def add_periodic_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                        parents: list[argparse.ArgumentParser]) -> None:
    """Add ``tasks periodic`` to the subcommands ``sub``, with the options of ``parents``
    (``--store``…; ``--app``, before the command or after it, required by
    ``_apps.NEEDS_APP``; the required ``--system``: ticks are read across tenants)."""
    p = sub.add_parser("periodic", parents=parents,
                       help="the schedules of the app (--app, @app.periodic): last and next "
                            "ticks")
    p.add_argument("--json", action="store_true",
                   help="print the schedules as one JSON object: now, schedules")


def _instant(tick: datetime | None, schedule: Schedule) -> str:
    """A tick in UTC, and in the schedule's zone when it has one."""
    if tick is None:
        return "none in 50 years"
    utc = tick.astimezone(UTC)
    text = utc.strftime("%Y-%m-%d %H:%M:%S") + (  # a sub-second tick to the millisecond
        f".{utc.microsecond // 1000:03d}Z" if utc.microsecond else "Z")
    if schedule.tz is not None and schedule.tz != "UTC":
        text += f" ({tick.astimezone(schedule.zone):%Y-%m-%d %H:%M %Z})"
    return text


def schedules_table(rows: list[tuple[Schedule, datetime | None, str, datetime | None]],
                    now: datetime) -> Table:
    """One row per schedule: ``(schedule, last tick, its task's state, next tick)``."""
    table = Table(title=f"periodic schedules (store clock {now:%Y-%m-%d %H:%M:%S}Z)",
                  title_justify="left")
    for column in ("schedule", "task", "when", "queue", "catch up", "last tick", "last run",
                   "next tick"):
        table.add_column(column)
    for schedule, last, state, following in rows:
        table.add_row(cell(schedule.name), cell(schedule.task), cell(schedule.describe()),
                      cell(schedule.queue), str(schedule.catch_up), _instant(last, schedule),
                      state_text(state), _instant(following, schedule))
    return table


def state_text(state: str) -> Text:
    """The "last run" cell: a status, styled, or a note (``not created``, ``-``)."""
    try:
        return status_text(TaskStatus(state))
    except ValueError:
        return cell(state)


async def cmd_periodic(app: App, args: argparse.Namespace, console: Console) -> int:
    """List the app's schedules with their last tick (and its task's status) and next
    tick, on the store's clock.

    Raises:
        StoreUnavailable: the store cannot be reached.
    """
    if not app.schedules:
        one_line(console, f"no periodic schedules in {plain(args.app or 'the app')}")
        return 0
    store = await app.open()
    now = await store.now()
    rows: list[tuple[Schedule, datetime | None, str, datetime | None]] = []
    for schedule in app.schedules.values():
        last = schedule.latest(now)
        state = "-"
        if last is not None:
            try:
                snapshot = await app.get(schedule.task_id(last), System())
            except TaskNotFound:
                state = "not created"
            else:
                state = snapshot.status.value
        rows.append((schedule, last, state, schedule.following(now)))
    if args.json:
        print_json(console, {"now": instant_json(now), "schedules": [json_row({
            "name": schedule.name, "task": schedule.task, "when": schedule.describe(),
            "queue": schedule.queue, "catch_up": schedule.catch_up, "tz": schedule.tz,
            "last_tick": last, "last_run": None if state == "-" else state,
            "next_tick": following,
        }) for schedule, last, state, following in rows]})
    else:
        console.print(schedules_table(rows, now))
    return 0
