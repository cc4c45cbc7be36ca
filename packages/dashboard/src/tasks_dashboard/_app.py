"""``create_app``: the dashboard as an ASGI app over a tasks App, a store or a store URL.

Routes are named (``request.url_for``), so the app works mounted under any path of the
user's own app. Errors of the tasks API become pages: a missing task 404, a refused
argument 400, an unreachable store 503 — a long value they name cut short (:func:`brief`);
the 503 page of a GET reloads itself every 10 s, so an open tab recovers with the store.
An App or store given in is the caller's and is never closed here; one opened from a URL is
closed when the ASGI lifespan ends.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Iterable
from importlib.resources import files
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from tasks_core import (
    App,
    AuthorizationError,
    InvalidInput,
    StoreUnavailable,
    TaskNotFound,
    TasksError,
    TaskStore,
)

from tasks_dashboard._gate import OPERATOR, Gate
from tasks_dashboard._security import (
    Authorize,
    DashboardConfigError,
    Guard,
    allowed_host_names,
)
from tasks_dashboard._views import Views

__all__ = ["create_app"]

_STATUS = ((TaskNotFound, 404), (InvalidInput, 400), (AuthorizationError, 403),
           (StoreUnavailable, 503))
SHOWN_RUN = 100
"""An error page shows at most this many characters of a value it names (a bad status, an
id), then "…"."""


def brief(message: str) -> str:
    """``message`` with each value it quotes (``'…'`` or ``"…"``, as ``repr`` quotes) and
    every run of more than :data:`SHOWN_RUN` characters without a space cut to its first
    :data:`SHOWN_RUN` and "…"."""
    def cut(found: re.Match[str]) -> str:
        text = found.group()
        return text if len(text) <= SHOWN_RUN else text[:SHOWN_RUN] + "…"
    return re.sub(rf"""'[^']*'|"[^"]*"|\S{{{SHOWN_RUN + 1},}}""", cut, message)


def create_app(app_or_store: App | TaskStore | str, *, token: str | None = None,
               authorize: Authorize | None = None,
               allowed_hosts: Iterable[str] | None = None) -> Starlette:
    """The dashboard over ``app_or_store``: an :class:`~tasks_core.App` (its queues are
    listed even when empty), a :class:`~tasks_core.TaskStore` or a store URL.

    Args:
        app_or_store: what the dashboard reads and acts on, as ``System()``.
        token: the operator token (at least 8 characters): a login form sets a session
            cookie; scripts send ``Authorization: Bearer TOKEN``.
        authorize: ``authorize(request) -> bool`` (or an awaitable bool), asked for every
            request: the embedding app's own check.
        allowed_hosts: the names (``Host`` header without its port) the dashboard answers
            to; any other is refused with 400 before the login (DNS rebinding).
            ``loopback_hosts(address)`` gives them for a dashboard served on a loopback
            address (``tasks dashboard`` does). ``None``: no check (an app mounted behind
            its own host handling).

    Raises:
        DashboardConfigError: neither ``token`` nor ``authorize`` (there is no open
            dashboard), a short or overlong token or one not printable ASCII,
            ``allowed_hosts`` not a collection of names, or
            something else than an App, store or URL.
    """
    guard = Guard(token=token, authorize=authorize)
    hosts = allowed_host_names(allowed_hosts)
    owned = False
    if isinstance(app_or_store, App):
        app = app_or_store
    elif isinstance(app_or_store, str):
        app, owned = App(app_or_store), True
    elif isinstance(app_or_store, TaskStore):
        app = App(store=app_or_store)
    else:
        raise DashboardConfigError("create_app takes an App, a TaskStore or a store URL")
    views = Views(app, guard)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if owned:
                await app.aclose()

    async def failed(request: Request, exc: Exception) -> Response:
        visitor = not getattr(request.state, OPERATOR, False)  # no static files for one
        if isinstance(exc, HTTPException):
            return views.render(request, "error.html", exc.status_code, login_page=visitor,
                                message=brief(str(exc.detail)), headers=exc.headers)
        status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 500)
        return views.render(request, "error.html", status, login_page=visitor,
                            message=brief(f"{type(exc).__name__}: {exc}"),
                            retry=status == 503 and request.method == "GET")

    routes = [
        Route("/", views.queues, name="queues"),
        Route("/tasks", views.tasks, name="tasks"),
        Route("/task", views.task, name="task"),
        Route("/task/events", views.task_events, name="task_events"),
        Route("/task/cancel", views.cancel, methods=["POST"], name="cancel"),
        Route("/task/respond", views.respond, methods=["POST"], name="respond"),
        Route("/workers", views.workers, name="workers"),
        Route("/login", views.login, methods=["GET", "POST"], name="login"),
        Route("/logout", views.logout, methods=["POST"], name="logout"),
        Mount("/static", StaticFiles(directory=str(files("tasks_dashboard") / "static")),
              name="static"),
    ]
    handlers: dict[Any, Any] = {TasksError: failed, HTTPException: failed}
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers,
                     middleware=[Middleware(Gate, guard=guard, login_page=views.login_page,
                                            allowed_hosts=hosts)])
