"""``tasks worker``: run a worker until a signal, then drain; ``--metrics-port`` serves
its metrics for Prometheus (:func:`tasks_core.telemetry.serve_prometheus`) meanwhile."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING

from rich.console import Console

from tasks_core import telemetry
from tasks_core.cli._options import as_typed, typed
from tasks_core.cli._render import one_line, plain, shown_url
from tasks_core.cli._signals import Interrupts
from tasks_core.errors import InvalidInput
from tasks_core.runtime._worker_gc import tune_for_serving
from tasks_core.runtime.app import App
from tasks_core.runtime.worker import Worker

if TYPE_CHECKING:
    import argparse

    from tasks_core._prometheus import PrometheusEndpoint

__all__ = ["cmd_worker"]

log = logging.getLogger("tasks_core.cli")


DEFAULT_METRICS_HOST = "127.0.0.1"

DURATIONS = {"lease_for": ("lease", "--lease"), "input_park": ("input_park", "--input-park"),
             "reap_interval": ("reap_interval", "--reap-interval"),
             "drain_timeout": ("drain_timeout", "--drain-timeout")}
"""The worker's durations the command takes: ``Worker``'s argument (which its refusal
names): the attribute of the parsed arguments, the option."""


def _metrics(args: argparse.Namespace) -> PrometheusEndpoint | None:
    """The Prometheus endpoint ``--metrics-port`` asks for (``None`` without it), on
    ``--metrics-host`` (default 127.0.0.1).

    Raises:
        InvalidInput: ``--metrics-host`` without ``--metrics-port`` (it would be ignored),
            blank, or a name that does not resolve; the address cannot be bound (the port
            is one of the CLI's sizes).
        CapabilityNotSupported: the Prometheus extra is not installed.
    """
    port = getattr(args, "metrics_port", None)  # checked with the CLI's sizes
    host = getattr(args, "metrics_host", None)
    if port is None:
        if host is not None:
            raise InvalidInput("--metrics-host needs --metrics-port: no metrics are served "
                               "without a port")
        return None
    if host is None:
        host = DEFAULT_METRICS_HOST
    elif not host.strip():
        raise InvalidInput("--metrics-host must not be blank")
    try:
        return telemetry.serve_prometheus(port, host)
    except OSError as exc:
        which = "--metrics-host" if isinstance(exc, socket.gaierror) else "--metrics-port"
        raise InvalidInput(f"{which}: cannot listen on {host}:{port}: "
                           f"{exc.strerror or exc}") from None


def _served(app: App, worker: Worker) -> str:
    """The worker's queues, each with the fleet-wide limits this worker applies to it
    (``lim (max_running 3)``, ``api (rate 5 per 2s)``): every worker counts against the
    shared leases with its own app's numbers, so a mismatch between workers shows here."""
    shown = []
    for name in worker.queues:
        queue = app.queues[name]
        limits = []
        if queue.max_running is not None or queue.exclusive:
            limits.append(f"max_running {queue.max_running or 1}")
        if queue.rate is not None:
            limits.append(f"rate {queue.rate[0]} per {queue.rate[1]:g}s")
        shown.append(f"{name} ({', '.join(limits)})" if limits else name)
    return ", ".join(shown)


def _worker_of(app: App, args: argparse.Namespace) -> Worker:
    """The worker ``tasks worker`` asks for. Its ``--queues`` are declared on the app, as
    ``tasks submit`` without ``--app`` declares the queue it names: the operator names
    them, and a task of a registered name may have been submitted to any of them. Its
    durations (``--lease``, ``--input-park``, ``--reap-interval``, ``--drain-timeout``)
    are checked by the worker, before the store is opened; a refusal of one names the
    option and the worker's argument, and quotes the text as typed (``--lease (lease_for)
    must be in [0.001, 604800] seconds, not '1e9'``).

    Raises:
        InvalidInput: a bad option (``--prefetch``, ``--concurrency``, a duration…), an
            empty ``--queues`` or a bad queue name.
    """
    queues = (None if args.queues is None  # "" names no queue: refused, not every queue
              else [q.strip() for q in args.queues.split(",") if q.strip()])
    for queue in queues or ():
        app.declare_queue(queue)
    try:
        return Worker(
            app, queues=queues, concurrency=args.concurrency, recover=args.recover,
            lease_for=args.lease, input_park=args.input_park, prefetch=args.prefetch,
            reap_interval=None if args.no_reaper else args.reap_interval,
            drain_timeout=args.drain_timeout, periodic=not args.no_periodic,
        )
    except InvalidInput as exc:
        for named, (dest, option) in DURATIONS.items():
            if str(exc).startswith(f"{named} "):
                raise as_typed(exc, typed(args, dest), option, named) from None
        raise


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
        InvalidInput: a bad option, or ``--metrics-port`` cannot be bound.
        CapabilityNotSupported: exclusive queues on a store without them; the
            Prometheus extra is missing for ``--metrics-port``.
        UnknownStore, StoreUnavailable: the store cannot be opened.
    """
    worker = _worker_of(app, args)
    endpoint = _metrics(args)
    with Interrupts.installed() as interrupts:
        try:
            await app.open()
        except BaseException:
            if endpoint is not None:
                endpoint.close()
            raise
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
                              f"{plain(_served(app, worker))}, concurrency "
                              f"{worker.concurrency}{ahead}")
            if endpoint is not None:
                one_line(console, f"metrics for Prometheus at {plain(endpoint.url)}")
            code = await interrupts.exit_code(_serve(worker))
        finally:
            interrupts.closing()
            interrupts.on_first(None)
            untune()
            settled = await drain.end()
            if endpoint is not None:
                endpoint.close()
    if code != 0:
        return code
    if not settled:
        one_line(console, f"[yellow]{len(worker.running)} run(s) outlived the drain; their "
                          "leases expire and another worker recovers them[/]")
    return 0 if settled else 1
