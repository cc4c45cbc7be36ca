"""The ``tasks`` console script: parse the arguments, run one command, map refusals.

Commands are listed by ``tasks --help`` and in docs/cli.md. Every command takes ``--store
URL`` (default ``$TASKS_STORE``, refused when set but blank; else ``sqlite:///tasks.db``
when tasks-store-sql is installed, else ``memory://`` when tasks-store-memory is
installed). Commands that read or act on tasks say whom they act as — ``--user USER
[--tenant T]`` or ``--system`` — there is no default. A refusal prints one line on
stderr, ``error: KIND: message``, whatever the terminal width, and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
import time
from collections.abc import Sequence

from rich.console import Console

from tasks_core.cli._apps import NEEDS_APP, add_app_option, one_app
from tasks_core.cli._commands import COMMANDS
from tasks_core.cli._dashboard import add_dashboard_parser
from tasks_core.cli._options import (
    MAX_PAGE,
    MAX_PROCESSES,
    MAX_ROUNDS,
    MAX_SCAN,
    Seconds,
    check_arguments,
    check_options,
    number,
)
from tasks_core.cli._periodic import add_periodic_parser
from tasks_core.cli._render import output_console, plain
from tasks_core.cli._signals import (
    Interrupts,
    command_returned,
    exit_at_once_after_the_command,
)
from tasks_core.errors import InvalidInput, TasksError, UnknownStore
from tasks_core.models import TaskStatus
from tasks_core.runtime._defaults import (
    ENV_VAR,
    default_store_url,
    installed,
    require_default_store_url,
)
from tasks_core.runtime.app import App

__all__ = ["READS", "build_parser", "load_app", "main", "run"]

log = logging.getLogger("tasks_core.cli")

READS = frozenset({"ls", "show", "workers", "cancel", "respond", "dashboard", "periodic",
                   "reap"})
"""Commands on a store that exists (its tasks, its schedules' ticks, its expired tasks):
they open the store with ``create=False`` (never create one)."""


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (``attribute`` defaults to ``app``) from the current
    directory or ``sys.path``.

    Raises:
        InvalidInput: no module named, the module cannot be imported (its own error —
            ``sys.exit()`` and any ``BaseException`` but ``KeyboardInterrupt`` included —
            in one line: ``--verbose`` logs the traceback), the attribute is missing or is
            not an ``App``.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name.strip(". "):
        raise InvalidInput(f"--app takes MODULE:ATTR (e.g. myapp:app), not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the user's module: ImportError, SyntaxError, its own
        # raise, sys.exit() (which would end the command with the module's code, unsaid)
        log.debug("importing %r failed", module_name, exc_info=True)
        hint = "" if log.isEnabledFor(logging.DEBUG) else " (--verbose shows the traceback)"
        raise InvalidInput(f"cannot import {module_name!r}: {type(exc).__name__}: "
                           f"{exc}{hint}") from None
    app = getattr(module, attribute or "app", None)
    if not isinstance(app, App):
        raise InvalidInput(f"{spec!r} is not an App (expected module:attribute)")
    return app


def _common(*, top: bool) -> argparse.ArgumentParser:
    """``--store`` and ``--verbose`` (``--app`` too before the command), accepted before
    and after the command. After it they default to "not given" (``SUPPRESS``): a
    subcommand's default must never overwrite a value given before the command (``tasks
    --store URL ls``)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", metavar="URL",
                        default=None if top else argparse.SUPPRESS,
                        help=f"store URL (default ${ENV_VAR}, else sqlite:///tasks.db when "
                             "tasks-store-sql is installed, else memory:// when "
                             "tasks-store-memory is installed)")
    if top:
        add_app_option(common, top=True)
    common.add_argument("-v", "--verbose", action="store_true",
                        default=False if top else argparse.SUPPRESS, help="debug logging")
    return common


def _prefetch(text: str) -> int | float | str:
    """``--prefetch``: ``auto`` or a number (the worker checks it: an integer in range).

    Raises:
        argparse.ArgumentTypeError: neither (argparse reports it as an invalid value).
    """
    if text == "auto":
        return text
    try:
        return number(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"'auto' or a count, not {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``tasks``."""
    common = _common(top=False)
    withapp = argparse.ArgumentParser(add_help=False)
    add_app_option(withapp)
    who = argparse.ArgumentParser(add_help=False)
    # No defaulted authority: every command that reads or acts says whom it acts as.
    acting = who.add_argument_group("who acts (one is required)").add_mutually_exclusive_group(
        required=True)
    acting.add_argument("--user", help="act as Owner(USER)")
    acting.add_argument("--system", action="store_true",
                        help="act as the operator, System (every tenant unless --tenant)")
    who.add_argument("--tenant", help="the tenant (default: 'default' for --user, every "
                                      "tenant for --system)")
    operator = argparse.ArgumentParser(add_help=False)  # admin commands: System() only
    operator.add_argument("--system", action="store_true", required=True,
                          help="act as the operator, System() of every tenant (required: "
                               "this command is an admin action)")

    parser = argparse.ArgumentParser(prog="tasks", parents=[_common(top=True)],
                                     description="Durable background tasks.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("worker", parents=[common, withapp],
                       help="run a worker for APP (module:attr)")
    p.add_argument("worker_app", nargs="?", metavar="APP",
                   help="module:attribute of your App, e.g. myapp:app (or --app)")
    p.add_argument("--queues", help="comma-separated queues (default: every declared queue)")
    p.add_argument("--concurrency", type=number, help="runs at once (default 8)")
    p.add_argument("--prefetch", type=_prefetch, default="auto", metavar="auto|N",
                   help="tasks claimed beyond the free slots, for queues without a "
                        "concurrency limit (default auto: up to 16 x --concurrency, at "
                        "most 1000, while runs are short; 0: none waits holding a lease)")
    p.add_argument("--recover", choices=("retry", "fail"), default="retry",
                   help="what to do with tasks of a dead worker (default: retry)")
    p.add_argument("--lease", action=Seconds, default=30.0, metavar="DURATION",
                   help="the lease of a claim: seconds, or 30s, 1.5m, 2h, 1d (default 30s)")
    p.add_argument("--input-park", action=Seconds, default=30.0, metavar="DURATION",
                   help="how long a run waits for input before freeing its slot (default 30s)")
    p.add_argument("--drain-timeout", action=Seconds, default=5.0, metavar="DURATION",
                   help="how long to wait for running tasks on SIGTERM (default 5s)")
    reaper = p.add_mutually_exclusive_group()
    reaper.add_argument("--reap-interval", action=Seconds, default=60.0, metavar="DURATION",
                        help="time between reaper sweeps (default 1m)")
    reaper.add_argument("--no-reaper", action="store_true", help="do not reap in this worker")
    p.add_argument("--no-periodic", action="store_true",
                   help="do not run the app's periodic schedules in this worker")
    p.add_argument("--metrics-port", type=number, metavar="PORT",
                   help="serve the task metrics for Prometheus at http://HOST:PORT/metrics "
                        "(e.g. 9464; needs tasks-core[prometheus])")
    p.add_argument("--metrics-host", metavar="HOST",
                   help="the address of --metrics-port (default 127.0.0.1)")

    p = sub.add_parser("submit", parents=[common, withapp, who], help="submit a task by name")
    p.add_argument("name", nargs="?",
                   help="the registered task name (with --many: of lines without 'task')")
    p.add_argument("--many", metavar="FILE.jsonl",
                   help="submit every line of FILE ('-': stdin) in one batch: a JSON object "
                        "of task, input, key, global, queue, delay, at, priority")
    p.add_argument("--input", help="JSON object of keyword arguments")
    p.add_argument("--key", help="dedup key")
    p.add_argument("--global", dest="global_key", action="store_true",
                   help="the key is global (not scoped to the owner)")
    p.add_argument("--queue", help="queue (default: the task's with --app, else 'default')")
    p.add_argument("--wait", action="store_true",
                   help="follow the task until it ends (says so once when no live worker "
                        "serves its queue)")
    p.add_argument("--priority", type=number, metavar="N",
                   help="-100..100; higher is served first (default: the task's, else 0)")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--delay", metavar="DURATION",
                      help="start no sooner than this after the store's clock reads the "
                           "submit: 30, 30s, 5m, 2h or 1d")
    when.add_argument("--at", metavar="INSTANT",
                      help="start no sooner than this ISO 8601 instant with a time zone, "
                           "e.g. 2026-12-24T09:00Z")

    p = sub.add_parser("ls", parents=[common, withapp, who], help="list tasks, newest first")
    p.add_argument("--status", action="append",
                   choices=[status.value for status in TaskStatus],
                   help="filter by status (repeatable)")
    p.add_argument("--queue", help="filter by queue")
    p.add_argument("--limit", type=number, default=50,
                   help=f"page size, 1..{MAX_PAGE} (default 50)")
    p.add_argument("--after", help="the last id of the previous page")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--wide", action="store_true", help="more columns")
    shape.add_argument("--json", action="store_true",
                       help="print the page as one JSON object: tasks, next_after, capped")
    p.add_argument("--scan", type=number, default=10_000, metavar="N",
                   help=f"read at most N matching tasks (1..{MAX_SCAN}) to order them "
                        "(default 10000)")

    p = sub.add_parser("workers", parents=[common, withapp, who],
                       help="live workers: those holding live leases")
    p.add_argument("--queue", help="only leases of this queue")
    p.add_argument("--lease", action=Seconds, metavar="DURATION",
                   help="the workers' lease length (tasks worker --lease, checked the "
                        "same way): shows the last heartbeat instead of the lease's expiry")
    p.add_argument("--json", action="store_true",
                   help="print the workers as one JSON object: now, workers")

    p = sub.add_parser("show", parents=[common, withapp, who], help="a task and its event history")
    p.add_argument("id")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--follow", "-f", action="store_true",
                       help="draw live progress until the task ends")
    shape.add_argument("--json", action="store_true",
                       help="print the task and its history as one JSON object")

    p = sub.add_parser("cancel", parents=[common, withapp, who], help="cancel a task")
    p.add_argument("id")

    p = sub.add_parser("respond", parents=[common, withapp, who],
                       help="answer a task's input request")
    p.add_argument("id")
    p.add_argument("answers", nargs="+", metavar="KEY=VALUE",
                   help="an answer per key; VALUE is JSON (or else a string)")

    p = sub.add_parser("reap", parents=[common, withapp, operator],
                       help="delete expired tasks now")
    p.add_argument("--limit", type=number, default=1000,
                   help=f"delete at most this many expired tasks, 1..{MAX_SCAN} "
                        "(default 1000)")

    p = sub.add_parser("migrate", parents=[common, withapp],
                       help="move the store's schema to the installed code's revision")
    p.add_argument("--to", default="head",
                   help='target revision (default "head"; "base" drops every table)')
    p.add_argument("--namespace", help="the namespace (table prefix) to migrate")

    add_periodic_parser(sub, [common, withapp, operator])
    add_dashboard_parser(sub, [common, withapp])
    sub.add_parser("backends", parents=[common], help="installed store plugins")
    sub.add_parser("demo", parents=[common], help="run the demo (a few seconds)")

    p = sub.add_parser("stress", parents=[common],
                       help="multi-process stress run with exact invariants (needs "
                            "tasks-contract-tests)")
    p.add_argument("--json", action="store_true",
                   help='print the JSON report ("ok": true only when every invariant holds)')
    p.add_argument("--out", metavar="FILE", help="also write the JSON report to FILE")
    p.add_argument("--small", action="store_true", help="the fast subset (CI sizes)")
    for name, what in (("tasks", f"CAS tasks, and soak tasks per round (1..{MAX_SCAN})"),
                       ("writers", f"CAS writer processes (2..{MAX_PROCESSES})"),
                       ("workers", f"soak worker processes (1..{MAX_PROCESSES})"),
                       ("rounds", f"soak rounds (1..{MAX_ROUNDS})")):
        p.add_argument(f"--{name}", type=number, help=what)
    p.add_argument("--timeout", action=Seconds, metavar="DURATION",
                   help="how long each workload may take: seconds, or 30s, 5m, 2h…")
    return parser


def _app_for(args: argparse.Namespace) -> App:
    """The app a command acts on: the user's for ``tasks worker APP`` and ``--app APP``
    (:func:`one_app`; its tasks, queues and schedules; ``--store`` replaces its URL), else
    a bare ``App`` on ``--store`` or the default store.

    Raises:
        InvalidInput: APP cannot be imported or is not an ``App``; no app for a command
            of ``NEEDS_APP``; an empty ``--store``; ``$TASKS_STORE`` set but blank
            where the default store would be used.
        UnknownStore: no store given and no store plugin installed (``backends`` still
            answers: it is how one finds out).
    """
    if args.store is not None and not args.store.strip():
        # An unset variable (--store "$URL") must not mean "a fresh default store here".
        raise InvalidInput("--store is empty; give a store URL, or leave the option out "
                           "for the default store")
    spec = args.app
    if spec is None and args.command in NEEDS_APP:
        raise InvalidInput(NEEDS_APP[args.command])
    if spec is not None:
        app = load_app(spec)
        if args.store:
            app.use_store(args.store)
        return app
    if args.store:
        return App(args.store)
    return App(default_store_url()[0] if args.command == "backends"
               else require_default_store_url())


async def _command(args: argparse.Namespace, app: App | None, console: Console) -> int:
    """Run the command on ``app`` (or on :func:`_app_for`'s, closed afterwards).

    Raises:
        TasksError: the command's refusal.
    """
    owned = app is None
    app = _app_for(args) if app is None else app
    reading = owned and args.command in READS and getattr(app, "_store", None) is None
    if reading:
        app.store_options["create"] = False  # every store's option (plugins.StoreFactory)
    try:
        return await COMMANDS[args.command](app, args, console)
    except UnknownStore as exc:
        if not (reading and installed(app.url or default_store_url()[0])):
            raise  # not a read, or no plugin serves the URL: the error says so
        hint = ("the app's first worker or submit creates it, or name another: --store URL"
                if args.app is not None else
                "run where it is, or name it: --app module:app or --store URL")
        raise UnknownStore(f"{exc}; reading never creates a store: {hint}") from None
    finally:
        if args.command not in ("demo", "stress"):
            _note_private(app)
        if owned:
            await app.aclose()


def _note_private(app: App) -> None:
    """Say that the command's store, if it opened one, lived and died with this process."""
    store = getattr(app, "_store", None)
    if store is not None and not store.capabilities.durable:
        Console(stderr=True, emoji=False, soft_wrap=True).print(
            f"[yellow]note:[/] {plain(app.url or '')} is private to this process and starts "
            "empty; use --store sqlite:///tasks.db (needs tasks-store-sql) to share tasks "
            "between commands and workers.", highlight=False)


async def run(argv: Sequence[str], *, app: App | None = None,
              console: Console | None = None) -> int:
    """Run one command; ``app`` replaces the one built from ``--store`` (tests, embedding).
    ``tasks worker`` handles SIGTERM/SIGINT from here until it returns, its app's close
    included: the first drains, a second exits at once with 130.

    Returns:
        The exit code.

    Raises:
        TasksError: the command's refusal (``main`` prints it: ``error: KIND: message``).
    """
    check_arguments(argv)
    args = build_parser().parse_args(list(argv))
    one_app(args)
    check_options(args)
    console = console or output_console()
    if args.command != "worker":
        return await _command(args, app, console)
    with Interrupts.installed() as interrupts:
        return await interrupts.exit_code(_command(args, app, console))


def _ours_or_warning(record: logging.LogRecord) -> bool:
    """What the console script logs: tasks' own loggers (``tasks_core``, a store's
    ``tasks_store_…``) at their level — DEBUG with ``--verbose`` — and anything else from
    WARNING up: a driver's DEBUG log (PyMongo's commands, with task payloads in them) is
    never turned on by ``-v``."""
    return record.levelno >= logging.WARNING or record.name.startswith("tasks")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``tasks`` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(args_list)
    quiet = logging.INFO if args.command == "worker" else logging.ERROR
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s.%(msecs)03dZ %(levelname)-7s %(name)s: %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%S",
    )
    if not args.verbose:
        logging.getLogger("tasks_core").setLevel(quiet)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_ours_or_warning)
        if handler.formatter is not None:  # every instant printed is UTC and says so
            handler.formatter.converter = time.gmtime
    # soft_wrap: rich would otherwise wrap at the terminal width (80 columns when stderr
    # is not a terminal); a refusal is one line, and plain() escapes any newline in it.
    err = Console(stderr=True, soft_wrap=True, emoji=False)
    if args.command == "worker":  # the process ends once it returns
        exit_at_once_after_the_command()
    try:
        code = asyncio.run(run(args_list))
    except KeyboardInterrupt:
        code = 130
    except TasksError as exc:
        err.print(f"[red]error:[/] {type(exc).__name__}: {plain(exc)}", highlight=False)
        code = 2
    except TypeError as exc:
        err.print(f"[red]error:[/] {plain(exc)}", highlight=False)
        code = 2
    return command_returned(code)
