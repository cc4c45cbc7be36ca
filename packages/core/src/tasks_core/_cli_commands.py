"""The ``tasks`` CLI commands, each ``async (app, args, console) -> exit code``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console
from rich.live import Live

from tasks_core._cli_render import (
    Bars,
    backends_table,
    history_table,
    plain,
    snapshot_table,
    tasks_table,
)
from tasks_core._defaults import default_store_url
from tasks_core._registry import available_stores, find_store, install_hint
from tasks_core._worker_gc import tune_for_serving
from tasks_core.app import App
from tasks_core.authority import Authority, Owner, System
from tasks_core.errors import InvalidInput
from tasks_core.worker import Worker

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


async def cmd_worker(app: App, args: argparse.Namespace, console: Console) -> int:
    """Run a worker until SIGTERM/SIGINT, then drain; exit 0 when everything settled."""
    queues = [q.strip() for q in args.queues.split(",") if q.strip()] if args.queues else None
    for queue in queues or ():
        app.declare_queue(queue)
    worker = Worker(
        app, queues=queues, concurrency=args.concurrency, recover=args.recover,
        lease_for=args.lease, input_park=args.input_park, prefetch=args.prefetch,
        reap_interval=None if args.no_reaper else args.reap_interval,
    )
    await app.open()
    # Everything loaded so far lives as long as the process: out of the collector's scans,
    # and young collections far apart (see _worker_gc); undone when serving ends, for a
    # caller that goes on in the same process.
    untune = tune_for_serving()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    signals = 0
    drained: list[bool] = []
    draining: list[asyncio.Task[None]] = []

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("received %s: draining (again to exit at once)", signal.Signals(signum).name)

            async def drain() -> None:
                drained.append(await worker.shutdown(args.drain_timeout))

            draining.append(loop.create_task(drain()))
        elif main is not None:
            log.warning("second signal: exiting without waiting; running tasks keep their "
                        "leases until they expire")
            main.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, on_signal, signum)
    ahead = f", prefetch {worker.prefetch}" if worker.prefetch else ""
    console.print(f"worker {plain(worker.worker_id)} on {plain(app.url)}: queues "
                  f"{plain(', '.join(worker.queues))}, concurrency {worker.concurrency}{ahead}",
                  highlight=False)
    try:
        await worker.run()
    except asyncio.CancelledError:
        return 130
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signum)
        untune()
    settled = drained[0] if drained else True
    if not settled:
        console.print(f"[yellow]{len(worker.running)} run(s) outlived the drain; their leases "
                      "expire and another worker recovers them[/]")
    return 0 if settled else 1


async def cmd_submit(app: App, args: argparse.Namespace, console: Console) -> int:
    """Submit a task by name (optionally wait for it)."""
    try:
        data = _json_value(args.input, "--input") if args.input else None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"--input is not JSON: {exc.msg}") from None
    if args.queue:
        app.declare_queue(args.queue)
    authority = authority_of(args)
    submitted = await app.submit(
        args.name, data, authority, key=args.key,
        dedup="global" if args.global_key else "owner", queue=args.queue,
    )
    console.print(f"{submitted.outcome}: {plain(submitted.id)}", highlight=False)
    if args.wait:
        return await _follow(app, submitted.id, authority, console)
    return 0


async def cmd_ls(app: App, args: argparse.Namespace, console: Console) -> int:
    """List tasks (one page; ``--after`` for the next)."""
    page = await app.list(authority_of(args), status=args.status or None, queue=args.queue,
                          after=args.after, limit=args.limit)
    console.print(tasks_table(page.items, wide=args.wide))
    if page.next_after:
        console.print(f"more: tasks ls … --after {plain(repr(page.next_after))}",
                      highlight=False)
    return 0


async def cmd_show(app: App, args: argparse.Namespace, console: Console) -> int:
    """Show one task and its history; ``--follow`` draws its progress until it ends."""
    authority = authority_of(args)
    if args.follow:
        await _follow(app, args.id, authority, console)
    console.print(snapshot_table(await app.get(args.id, authority)))
    console.print(history_table(await app.history(args.id, authority)))
    return 0


async def _follow(app: App, task_id: str, authority: Authority, console: Console) -> int:
    bars = Bars(console)
    with Live(bars.renderable(), console=console, refresh_per_second=10,
              transient=False) as live:
        async for snapshot in app.watch(task_id, authority, poll_interval=0.2):
            bars.update(snapshot)
            live.update(bars.renderable(), refresh=True)
            last = snapshot
    return 0 if last.status == "completed" else 1


async def cmd_cancel(app: App, args: argparse.Namespace, console: Console) -> int:
    """Cancel a task."""
    snapshot = await app.cancel(args.id, authority_of(args))
    console.print(f"{plain(snapshot.id)}: {snapshot.status.value}", highlight=False)
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
        console.print("no outstanding question matched; nothing changed")
        return 1
    console.print(f"{plain(result.snapshot.id)}: answer {result.outcome}; now "
                  f"{result.snapshot.status.value}", highlight=False)
    return 0


async def cmd_reap(app: App, args: argparse.Namespace, console: Console) -> int:
    """Delete expired tasks now."""
    reaped = await app.reap(System(), limit=args.limit)
    console.print(f"reaped {len(reaped)} expired task(s)")
    for task_id in reaped:
        console.print(f"  {plain(task_id)}", highlight=False)
    return 0


async def cmd_migrate(app: App, args: argparse.Namespace, console: Console) -> int:
    """Move the store's schema to ``--to`` through its plugin (without opening the store:
    a store refuses to open a schema older than its code)."""
    url = args.store or app.url or default_store_url()[0]
    spec = find_store(url)
    if spec.migrate is None:
        console.print(f"the {spec.name} store has no schema to migrate")
        return 0
    before, after = await spec.migrate(url, to=args.to, namespace=args.namespace)
    if before == after:
        console.print(f"schema already at {after or 'nothing (no tables)'}", highlight=False)
    else:
        console.print(f"schema migrated from {before or 'nothing'} to {after or 'nothing'}",
                      highlight=False)
    return 0


async def cmd_backends(app: App, args: argparse.Namespace, console: Console) -> int:
    """Installed store plugins and their capabilities."""
    url, why = default_store_url()
    console.print(backends_table(available_stores(), f"{url} — {why}"))
    return 0


async def cmd_demo(app: App, args: argparse.Namespace, console: Console) -> int:
    """The demo: a batch of tasks and a worker in this process."""
    from tasks_core.demo import run_demo

    return await run_demo(app.url or default_store_url()[0], console=console)


async def cmd_stress(app: App, args: argparse.Namespace, console: Console) -> int:
    """The stress harness of tasks-contract-tests, imported only now (core does not depend
    on it)."""
    try:
        stress = importlib.import_module("tasks_contract_tests.stress")
    except ImportError:
        console.print("[red]error:[/] tasks stress needs the contract suite: "
                      f"{install_hint('tasks-contract-tests')}", highlight=False)
        return 2
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
}
