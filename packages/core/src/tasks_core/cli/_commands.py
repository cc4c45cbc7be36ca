"""The ``tasks`` CLI commands, each ``async (app, args, console) -> exit code``."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console

from tasks_core._json import parse_answer, parse_json
from tasks_core._registry import available_stores, find_store
from tasks_core.authority import Authority, Owner, System
from tasks_core.cli._dashboard import cmd_dashboard
from tasks_core.cli._many import read_items
from tasks_core.cli._options import duration
from tasks_core.cli._periodic import cmd_periodic
from tasks_core.cli._reads import (
    follow,
    list_newest_first,
    live_leases,
    print_ls,
    worker_rows,
    workers_table,
)
from tasks_core.cli._render import (
    backends_table,
    history_table,
    instant_json,
    json_row,
    one_line,
    plain,
    print_json,
    shown_url,
    snapshot_table,
)
from tasks_core.cli._stress import cmd_stress
from tasks_core.cli._worker_cmd import cmd_worker
from tasks_core.definitions import TaskDef
from tasks_core.durations import MAX_WAIT_S, parse_instant
from tasks_core.errors import CapacityExceeded, InvalidInput
from tasks_core.models import TaskStatus
from tasks_core.runtime._defaults import default_store, default_store_url
from tasks_core.runtime.app import App

__all__ = ["COMMANDS", "authority_of"]

log = logging.getLogger("tasks_core.cli")

Command = Callable[[App, argparse.Namespace, Console], Awaitable[int]]


def authority_of(args: argparse.Namespace) -> Authority:
    """``--user U [--tenant T]`` acts as ``Owner(U, T)``; ``--system [--tenant T]`` as
    ``System(T)`` (every tenant when ``--tenant`` is not given). The parser requires one.

    Raises:
        TypeError: neither was given (the parser prevents it).
    """
    user = getattr(args, "user", None)
    tenant = getattr(args, "tenant", None)
    if user is not None:  # an empty --user is refused (InvalidInput), never ignored
        return Owner(user, tenant if tenant is not None else "default")
    if getattr(args, "system", False):
        return System(tenant)
    raise TypeError("say whom to act as: --user USER or --system")


def _task_of(app: App, args: argparse.Namespace) -> TaskDef | str:
    """What ``tasks submit`` submits. With ``--app``: the app's registration of the name,
    whose queue, retry, timeout and delivery limit apply (``--queue`` must name a queue
    the app declared). Without: the bare name, which gets the defaults; its ``--queue`` is
    declared here, since the operator names it.

    Raises:
        InvalidInput: with ``--app``, a name the app does not register; a bad queue name.
    """
    return _task_named(app, args, args.name, args.queue)


def _task_named(
    app: App, args: argparse.Namespace, name: str, queue: str | None
) -> TaskDef | str:
    """:func:`_task_of` for task ``name`` on ``queue`` (a line of ``--many``, too).

    Raises:
        InvalidInput: as :func:`_task_of`.
    """
    if args.app is None:
        if queue:
            app.declare_queue(queue)
        return name
    definition = app.tasks.get(name)
    if definition is None:
        raise InvalidInput(f"task {name!r} is not registered in {args.app}")
    return definition


async def cmd_submit(app: App, args: argparse.Namespace, console: Console) -> int:
    """Submit a task by name (see :func:`_task_of`); ``--wait`` follows it to its end.

    Raises:
        InvalidInput: bad ``--input``, key, queue, ``--delay`` or ``--at``, or a task
            ``--app`` does not register; nothing written.
        AuthorizationError, CapacityExceeded, StoreUnavailable: see ``App.submit``.
    """
    if args.many is not None:
        return await _submit_many(app, args, console)
    if args.name is None:
        raise InvalidInput("name the task to submit, or give --many FILE")
    try:
        data = None if args.input is None else parse_json(args.input, "--input")
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"--input is not JSON: {exc.msg}") from None
    if args.global_key and args.key is None:  # the API's message would name dedup= and key=
        raise InvalidInput("--global applies to a key: give --key, or leave --global out")
    task = _task_of(app, args)
    authority = authority_of(args)
    delay = (None if args.delay is None
             else duration(args.delay, "--delay", high=MAX_WAIT_S, allow_zero=True))
    run_at = None if args.at is None else parse_instant(args.at, "--at")
    submitted = await app.submit(
        task, data, authority, key=args.key,
        dedup="global" if args.global_key else "owner", queue=args.queue,
        delay=delay, run_at=run_at, priority=args.priority,
    )
    one_line(console, f"{submitted.outcome}: {plain(submitted.id)}")
    if args.wait:
        return await follow(app, submitted.id, authority, console, hint=True)
    return 0


async def _submit_many(app: App, args: argparse.Namespace, console: Console) -> int:
    """``tasks submit [NAME] --many FILE``: every line of FILE in one ``submit_many``
    (:mod:`tasks_core.cli._many`); one line per item, in order.

    Raises:
        InvalidInput: an option that a line gives instead, or a bad line (named by its
            number) or item (named by its index, from 0); nothing written.
        AuthorizationError, CapacityExceeded, StoreUnavailable: see ``App.submit_many``
            (a capacity refusal at one item prints the items submitted first).
    """
    given = [option for option, value in (
        ("--input", args.input), ("--key", args.key), ("--global", args.global_key),
        ("--queue", args.queue), ("--wait", args.wait), ("--priority", args.priority),
        ("--delay", args.delay), ("--at", args.at)) if value is not None and value is not False]
    if given:
        raise InvalidInput(f"--many takes every option from its lines, not {given[0]}")
    items = read_items(args.many, args.name,
                       lambda name, queue: _task_named(app, args, name, queue))
    if not items:
        one_line(console, "submitted nothing: the file holds no line")
        return 0
    try:
        done = await app.submit_many(items, authority_of(args))
    except CapacityExceeded as exc:  # refused at an item, others submitted: say which
        for index, submitted in sorted(exc.stored.items()):
            one_line(console, f"item {index}: {submitted.outcome}: {plain(submitted.id)}")
        exc.args = (str(exc).replace("(.stored)", "(listed above)"),)
        raise
    for submitted in done:
        one_line(console, f"{submitted.outcome}: {plain(submitted.id)}")
    return 0


async def cmd_ls(app: App, args: argparse.Namespace, console: Console) -> int:
    """List tasks newest first, one page (``--after`` for the next; see ``_reads``).

    Raises:
        InvalidInput: ``--after`` names no listed task.
    """
    rows, next_after, capped = await list_newest_first(app, authority_of(args), args)
    if args.json:
        print_json(console, {"tasks": [s.model_dump(mode="json") for s in rows],
                             "next_after": next_after, "capped": capped})
    else:
        print_ls(console, rows, next_after, capped, wide=args.wide, scan=args.scan)
    return 0


async def cmd_show(app: App, args: argparse.Namespace, console: Console) -> int:
    """Show one task and its history; ``--follow`` draws its progress until it ends, and
    then exits as ``submit --wait`` does (1 unless the task completed)."""
    authority = authority_of(args)
    code = await follow(app, args.id, authority, console) if args.follow else 0
    snapshot = await app.get(args.id, authority)
    history = await app.history(args.id, authority)  # read both first: all or nothing
    if args.json:
        print_json(console, {"task": snapshot.model_dump(mode="json"),
                             "history": [r.model_dump(mode="json") for r in history]})
        return code
    now = await (await app.open()).now()  # the lease's state at the store's clock
    console.print(snapshot_table(snapshot, now))
    console.print(history_table(history))
    return code


async def cmd_workers(app: App, args: argparse.Namespace, console: Console) -> int:
    """The workers holding live leases on tasks the caller can list (``--user U``: U's;
    ``--system``: every tenant's, or ``--tenant``'s): their task counts and last
    heartbeat."""
    leased, now = await live_leases(app, authority_of(args), args.queue)
    rows = worker_rows(leased, args.lease)
    if args.json:
        print_json(console, {"now": instant_json(now),
                             "workers": [json_row(row._asdict()) for row in rows]})
    elif not rows:
        one_line(console, "no live worker: no task holds a live lease")
    else:
        console.print(workers_table(rows, now))
    return 0


async def cmd_cancel(app: App, args: argparse.Namespace, console: Console) -> int:
    """Cancel a task; a task that had finished otherwise is left as it is, and the line
    says so (exit 0: nothing runs either way)."""
    snapshot = await app.cancel(args.id, authority_of(args))
    note = ("" if snapshot.status == TaskStatus.CANCELLED
            else " (it had finished before the cancel: nothing changed)")
    one_line(console, f"{plain(snapshot.id)}: {snapshot.status.value}{note}")
    return 0


async def cmd_respond(app: App, args: argparse.Namespace, console: Console) -> int:
    """Answer input requests: ``KEY=VALUE`` pairs, each VALUE read by
    :func:`tasks_core._json.parse_answer` (JSON, else the string typed); the line says
    which keys were ignored (not asked, or answered already).

    Raises:
        InvalidInput: a pair without ``=``, a key answered twice, or an answer
            ``parse_answer`` refuses; nothing written.
        TaskNotFound, AuthorizationError, StoreUnavailable: see ``App.respond``.
    """
    answers: dict[str, Any] = {}
    for pair in args.answers:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise InvalidInput(f"answers look like key=value, not {pair!r}")
        if key in answers:
            raise InvalidInput(f"the key {key!r} is answered twice")
        answers[key] = parse_answer(raw)
    result = await app.respond(args.id, answers, authority_of(args))
    if result.outcome == "unchanged":
        one_line(console, f"{plain(result.snapshot.id)}: no outstanding question matched; "
                          f"nothing changed (the task is {result.snapshot.status.value})")
        return 1
    accepted = result.record.accepted if result.record is not None else None
    ignored = [key for key in answers if accepted is not None and key not in accepted]
    note = f" (ignored, not asked: {plain(', '.join(ignored))})" if ignored else ""
    one_line(console, f"{plain(result.snapshot.id)}: answer {result.outcome}{note}; now "
                      f"{result.snapshot.status.value}")
    return 0


async def cmd_reap(app: App, args: argparse.Namespace, console: Console) -> int:
    """Delete expired tasks now."""
    reaped = await app.reap(System(), limit=args.limit)
    one_line(console, f"reaped {len(reaped)} expired task(s)")
    for task_id in reaped:
        one_line(console, f"  {plain(task_id)}")
    return 0


async def cmd_migrate(app: App, args: argparse.Namespace, console: Console) -> int:
    """Move the store's schema to ``--to`` through its plugin (without opening the store:
    a store refuses to open a schema older than its code)."""
    url = args.store or app.url or default_store_url()[0]
    spec = find_store(url)
    if spec.migrate is None:
        one_line(console, f"the {plain(spec.name)} store has no schema to migrate")
        return 0
    before, after = await spec.migrate(url, to=args.to, namespace=args.namespace)
    if before == after:
        one_line(console, f"schema already at {plain(after or 'nothing (no tables)')}")
    else:
        one_line(console, f"schema migrated from {plain(before or 'nothing')} to "
                          f"{plain(after or 'nothing')}")
    return 0


async def cmd_backends(app: App, args: argparse.Namespace, console: Console) -> int:
    """Installed store plugins and their capabilities."""
    url, why, servable = default_store()
    shown = shown_url(url) if servable else "none"  # no plugin serves either default
    console.print(backends_table(available_stores(), f"{shown} — {why}"))
    return 0


async def cmd_demo(app: App, args: argparse.Namespace, console: Console) -> int:
    """The demo: a batch of tasks and a worker in this process."""
    from tasks_core.cli.demo import run_demo

    return await run_demo(app.url or default_store_url()[0], console=console)


COMMANDS: dict[str, Command] = {
    "worker": cmd_worker,
    "workers": cmd_workers,
    "submit": cmd_submit,
    "ls": cmd_ls,
    "show": cmd_show,
    "cancel": cmd_cancel,
    "respond": cmd_respond,
    "reap": cmd_reap,
    "migrate": cmd_migrate,
    "backends": cmd_backends,
    "demo": cmd_demo,
    "stress": cmd_stress,
    "periodic": cmd_periodic,
    "dashboard": cmd_dashboard,
}
