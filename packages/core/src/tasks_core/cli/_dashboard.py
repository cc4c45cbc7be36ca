"""``tasks dashboard``: serve the web dashboard (the tasks-dashboard distribution).

Core does not depend on the dashboard: tasks_dashboard and uvicorn are imported only when
the command runs, and their absence is a refusal that says what to install. The command
binds to 127.0.0.1 unless ``--host`` says otherwise, and there is no open dashboard: the
operator token comes from ``--token`` or ``TASKS_DASHBOARD_TOKEN``, else it refuses.
"""

from __future__ import annotations

import argparse
import importlib
import os
import socket
from typing import Any

from rich.console import Console

from tasks_core.cli._options import number
from tasks_core.cli._render import shown_url
from tasks_core.errors import CapabilityNotSupported, InvalidInput
from tasks_core.plugins import install_hint
from tasks_core.runtime.app import App

__all__ = ["TOKEN_ENV", "add_dashboard_parser", "cmd_dashboard"]

TOKEN_ENV = "TASKS_DASHBOARD_TOKEN"


def add_dashboard_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                         parents: list[argparse.ArgumentParser]) -> None:
    """Add ``tasks dashboard`` to the subcommands ``sub``, with the options of ``parents``
    (``--store``…, ``--app``: its store and declared queues)."""
    p = sub.add_parser("dashboard", parents=parents,
                       help="serve the web dashboard (needs tasks-dashboard)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=number, default=8000, help="port (default 8000)")
    p.add_argument("--token", help=f"the operator token, at least 8 characters (default "
                                   f"${TOKEN_ENV}; prefer the variable: a command line "
                                   "is visible to other users)")


def _import(name: str) -> Any:
    """Import ``name``, which only tasks-dashboard installs.

    Raises:
        CapabilityNotSupported: it is not installed, with how to install it.
    """
    try:
        return importlib.import_module(name)
    except ImportError:
        raise CapabilityNotSupported(
            f"tasks dashboard needs the dashboard: {install_hint('tasks-dashboard')}"
        ) from None


async def cmd_dashboard(app: App, args: argparse.Namespace, console: Console) -> int:
    """Serve the dashboard over ``app`` until interrupted.

    Raises:
        CapabilityNotSupported: tasks-dashboard is not installed.
        InvalidInput: no operator token, or one the dashboard refuses; an address it
            cannot listen on.
    """
    dashboard = _import("tasks_dashboard")
    uvicorn = _import("uvicorn")
    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        raise InvalidInput(
            f"the dashboard needs an operator token: set {TOKEN_ENV} (or --token); for "
            "a fresh one: python -c 'import secrets; print(secrets.token_urlsafe())'")
    loopback = dashboard.loopback_hosts(args.host)
    try:
        web = dashboard.create_app(app, token=token, allowed_hosts=loopback)
    except dashboard.DashboardConfigError as exc:
        raise InvalidInput(str(exc)) from None
    if loopback is None:
        console.print(f"[yellow]note:[/] serving on {args.host}: anyone who can reach it "
                      "sees the login form; put TLS in front of it.")
    await app.open()
    listener = _listen(args.host, args.port)
    # No proxy headers: every client of a loopback dashboard is 127.0.0.1, which uvicorn
    # trusts by default, so any local process could name the address a login is logged with.
    server = uvicorn.Server(uvicorn.Config(web, log_level="warning", lifespan="off",
                                           timeout_graceful_shutdown=2, proxy_headers=False))
    host = f"[{args.host}]" if ":" in args.host else args.host
    console.print(f"tasks dashboard on http://{host}:{args.port}/ over "
                  f"{shown_url(app.url or '')}; log in with the operator token. Ctrl-C "
                  "stops it.")
    with listener:
        await server.serve(sockets=[listener])
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port``, bound here so that a refusal is the
    command's one line (not the web server's log and exit 3).

    Raises:
        InvalidInput: an unknown host, or an address that cannot be bound (taken, not
            this machine's).
    """
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:  # socket.gaierror included
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
