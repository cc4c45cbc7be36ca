"""The ``tasks`` CLI commands, each ``async (app, args, console) -> exit code``."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console
from rich.live import Live

from tasks_core._registry import available_stores, find_store, install_hint
from tasks_core.authority import Authority, Owner, System
from tasks_core.cli._dashboard import cmd_dashboard
from tasks_core.cli._many import read_items
from tasks_core.cli._periodic import cmd_periodic
from tasks_core.cli._render import (
    Bars,
    backends_table,
    history_table,
    one_line,
    plain,
    shown_url,
    snapshot_table,
    tasks_table,
)
from tasks_core.cli._signals import Interrupts
from tasks_core.definitions import TaskDef
from tasks_core.durations import MAX_WAIT_S, check_duration, parse_duration, parse_instant
from tasks_core.errors import CapabilityNotSupported, InvalidInput
from tasks_core.runtime._defaults import default_store_url
from tasks_core.runtime._worker_gc import tune_for_serving
from tasks_core.runtime.app import App
from tasks_core.runtime.worker import Worker

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


def _json_value(text: str, what: str) -> Any:
    """Parse ``text`` as JSON.

    Raises:
        json.JSONDecodeError: not JSON at all.
        InvalidInput: JSON that Python cannot read (nested too deeply, a number too long).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError):
        raise InvalidInput(f"{what} cannot be read: nested too deeply or a number too "
                           "long") from None


def _worker_of(app: App, args: argparse.Namespace) -> Worker:
    """The worker ``tasks worker`` asks for; ``--queues`` are declared on the app. Its
    durations (``--lease``, ``--input-park``, ``--reap-interval``, ``--drain-timeout``)
    are checked by the worker, before the store is opened.

    Raises:
        InvalidInput: a bad option (``--prefetch``, ``--concurrency``, a duration…) or
            queue name.
    """
    queues = [q.strip() for q in args.queues.split(",") if q.strip()] if args.queues else None
    for queue in queues or ():
        app.declare_queue(queue)
    return Worker(
        app, queues=queues, concurrency=args.concurrency, recover=args.recover,
        lease_for=args.lease, input_park=args.input_park, prefetch=args.prefetch,
        reap_interval=None if args.no_reaper else args.reap_interval,
        drain_timeout=args.drain_timeout, periodic=not args.no_periodic,
    )


class _Drain:
    """The worker's drain, started by the first signal, cut short by a second."""

    def __init__(self, worker: Worker, interrupts: Interrupts) -> None:
        self.worker = worker
        self.interrupts = interrupts
        self.task: asyncio.Task[bool] | None = None

    def start(self) -> None:
        """Begin the drain (``Worker.shutdown``, for the worker's ``drain_timeout``) in a
        task of its own."""
        self.task = asyncio.get_running_loop().create_task(
            self.worker.shutdown(), name="tasks:cli-drain")
        # Cancelled by the second signal's handler itself: the drain cannot finish (and log
        # "drain settled") in the loop step before the command sees that signal.
        self.interrupts.cut_short(self.task)

    async def end(self) -> bool:
        """Wait for the drain to end, cancelling it if it still runs (the worker stopped
        some other way); whether everything settled. With no drain, the worker stopped
        without one (an error): True, nothing is left to settle. A drain that did not
        finish settled nothing, and the log says so: the worker never logs it settled.
        """
        task = self.task
        if task is None:
            return True
        task.cancel()  # a no-op once it has finished
        await asyncio.wait({task})
        if task.cancelled():
            log.warning("worker %s: drain cut short; running tasks keep their leases until "
                        "they expire", self.worker.worker_id)
            return False
        return task.result()


async def _serve(worker: Worker) -> int:
    """Run ``worker`` until its drain finishes: exit code 0 (the drain decides later).

    Raises:
        CapabilityNotSupported: exclusive queues on a store without them.
    """
    await worker.run()
    return 0


async def cmd_worker(app: App, args: argparse.Namespace, console: Console) -> int:
    """Run a worker until SIGTERM/SIGINT, then drain: exit 0 when everything settled, 1
    when runs outlived the drain, 130 when a second signal cut it short. The signals are
    handled until the command returns (see ``_cli_signals``).

    Raises:
        InvalidInput: a bad option.
        CapabilityNotSupported: exclusive queues on a store without them.
        UnknownStore, StoreUnavailable: the store cannot be opened.
    """
    worker = _worker_of(app, args)
    with Interrupts.installed() as interrupts:
        await app.open()
        # Everything loaded so far lives as long as the process: out of the collector's
        # scans, and young collections far apart (see _worker_gc); undone when serving
        # ends, for a caller that goes on in the same process.
        untune = tune_for_serving()
        drain = _Drain(worker, interrupts)
        interrupts.on_first(drain.start)
        try:
            ahead = f", prefetch {worker.prefetch}" if worker.prefetch else ""
            where = shown_url(app.url or "")
            one_line(console, f"worker {plain(worker.worker_id)} on {plain(where)}: queues "
                              f"{plain(', '.join(worker.queues))}, concurrency "
                              f"{worker.concurrency}{ahead}")
            code = await interrupts.exit_code(_serve(worker))
        finally:
            interrupts.on_first(None)
            untune()
            settled = await drain.end()
    if code != 0:
        return code
    if not settled:
        one_line(console, f"[yellow]{len(worker.running)} run(s) outlived the drain; their "
                          "leases expire and another worker recovers them[/]")
    return 0 if settled else 1


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
        data = _json_value(args.input, "--input") if args.input else None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"--input is not JSON: {exc.msg}") from None
    task = _task_of(app, args)
    authority = authority_of(args)
    delay = (None if args.delay is None
             else parse_duration(args.delay, "--delay", high=MAX_WAIT_S, allow_zero=True))
    run_at = None if args.at is None else parse_instant(args.at, "--at")
    submitted = await app.submit(
        task, data, authority, key=args.key,
        dedup="global" if args.global_key else "owner", queue=args.queue,
        delay=delay, run_at=run_at, priority=args.priority,
    )
    one_line(console, f"{submitted.outcome}: {plain(submitted.id)}")
    if args.wait:
        return await _follow(app, submitted.id, authority, console)
    return 0


async def _submit_many(app: App, args: argparse.Namespace, console: Console) -> int:
    """``tasks submit [NAME] --many FILE``: every line of FILE in one ``submit_many``
    (:mod:`tasks_core.cli._many`); one line per item, in order.

    Raises:
        InvalidInput: an option that a line gives instead, or a bad line (named by its
            number) or item (named by its index, from 0); nothing written.
        AuthorizationError, CapacityExceeded, StoreUnavailable: see ``App.submit_many``.
    """
    given = [option for option, value in (
        ("--input", args.input), ("--key", args.key), ("--global", args.global_key),
        ("--queue", args.queue), ("--wait", args.wait), ("--priority", args.priority),
        ("--delay", args.delay), ("--at", args.at)) if value not in (None, False)]
    if given:
        raise InvalidInput(f"--many takes every option from its lines, not {given[0]}")
    items = read_items(args.many, args.name,
                       lambda name, queue: _task_named(app, args, name, queue))
    for submitted in await app.submit_many(items, authority_of(args)):
        one_line(console, f"{submitted.outcome}: {plain(submitted.id)}")
    return 0


async def cmd_ls(app: App, args: argparse.Namespace, console: Console) -> int:
    """List tasks (one page; ``--after`` for the next)."""
    page = await app.list(authority_of(args), status=args.status or None, queue=args.queue,
                          after=args.after, limit=args.limit)
    console.print(tasks_table(page.items, wide=args.wide))
    if page.next_after:
        one_line(console, f"more: tasks ls … --after {plain(repr(page.next_after))}")
    return 0


async def cmd_show(app: App, args: argparse.Namespace, console: Console) -> int:
    """Show one task and its history; ``--follow`` draws its progress until it ends."""
    authority = authority_of(args)
    if args.follow:
        await _follow(app, args.id, authority, console)
    snapshot = await app.get(args.id, authority)
    history = await app.history(args.id, authority)  # read both first: all or nothing
    console.print(snapshot_table(snapshot))
    console.print(history_table(history))
    return 0


async def _follow(app: App, task_id: str, authority: Authority, console: Console) -> int:
    bars = Bars(console)
    with Live(bars.renderable(), console=console, refresh_per_second=10,
              transient=False) as live:
        async for snapshot in app.watch(task_id, authority, poll_interval=0.2):
            bars.update(snapshot)
            live.update(bars.renderable(), refresh=True)
            last = snapshot
    if not console.is_terminal:
        console.line()  # off a terminal the last frame ends without one
    return 0 if last.status == "completed" else 1


async def cmd_cancel(app: App, args: argparse.Namespace, console: Console) -> int:
    """Cancel a task."""
    snapshot = await app.cancel(args.id, authority_of(args))
    one_line(console, f"{plain(snapshot.id)}: {snapshot.status.value}")
    return 0


async def cmd_respond(app: App, args: argparse.Namespace, console: Console) -> int:
    """Answer input requests: ``KEY=JSON`` pairs (a value that is not JSON is a string)."""
    answers: dict[str, Any] = {}
    for pair in args.answers:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise InvalidInput(f"answers look like key=value, not {pair!r}")
        try:
            answers[key] = _json_value(raw, "an answer")
        except json.JSONDecodeError:
            answers[key] = raw
    result = await app.respond(args.id, answers, authority_of(args))
    if result.outcome == "unchanged":
        one_line(console, "no outstanding question matched; nothing changed")
        return 1
    one_line(console, f"{plain(result.snapshot.id)}: answer {result.outcome}; now "
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
    url, why = default_store_url()
    console.print(backends_table(available_stores(), f"{shown_url(url)} — {why}"))
    return 0


async def cmd_demo(app: App, args: argparse.Namespace, console: Console) -> int:
    """The demo: a batch of tasks and a worker in this process."""
    from tasks_core.cli.demo import run_demo

    return await run_demo(app.url or default_store_url()[0], console=console)


async def cmd_stress(app: App, args: argparse.Namespace, console: Console) -> int:
    """The stress harness of tasks-contract-tests, imported only now (core does not depend
    on it).

    Raises:
        InvalidInput: a bad ``--timeout`` (see :mod:`tasks_core.durations`).
        CapabilityNotSupported: tasks-contract-tests is not installed (the message says
            how to install it).
    """
    check_duration(args.timeout, "--timeout", high=MAX_WAIT_S, allow_none=True)
    try:
        stress = importlib.import_module("tasks_contract_tests.stress")
    except ImportError:
        raise CapabilityNotSupported(
            "tasks stress needs the contract suite: "
            f"{install_hint('tasks-contract-tests')}") from None
    argv = ["--store", args.store or app.url or default_store_url()[0]]
    argv += [f"--{flag}" for flag in ("json", "small") if getattr(args, flag)]
    for option in ("out", "tasks", "writers", "workers", "rounds", "timeout"):
        if getattr(args, option) is not None:
            argv += [f"--{option}", str(getattr(args, option))]
    return int(await stress.main_async(argv, console))


COMMANDS: dict[str, Command] = {
    "worker": cmd_worker,
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
