"""The pages and actions of the dashboard, each ``async (request) -> Response``.

Views run behind :class:`~tasks_dashboard._gate.Gate` and act as ``System()``; every
POST reads its form through :func:`~tasks_dashboard._forms.checked_form` (capped, text
only, the CSRF check) and answers with a redirect. Templates autoescape everything: stored
data is always shown as text — and inert: every value a template renders, and the progress
message of the event stream, shows the characters that are not printable (bidi overrides,
control characters) as their escapes, as the CLI does (:func:`shown`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from tasks_core import App, InvalidInput, Owner, Snapshot, System, TasksError, TaskStatus
from tasks_core._inert import inert
from tasks_core._json import parse_answer
from tasks_core.authority import DEFAULT_TENANT

from tasks_dashboard import _reads
from tasks_dashboard._forms import SMALL_FORM_BYTES, answer_form_bytes, checked_form
from tasks_dashboard._security import CSRF_FIELD, SESSION_S, Guard, cookie, next_path

__all__ = ["Views"]

SYSTEM = System()
log = logging.getLogger("tasks_dashboard")
PAGE_SIZE = 50


def _age(instant: datetime | None, now: datetime | None = None) -> str:
    if instant is None:
        return "–"
    seconds = int(((now or datetime.now(UTC)) - instant).total_seconds())
    sign, s = ("in ", -seconds) if seconds < 0 else ("", seconds)
    if s < 60:
        return f"{sign}{s}s"
    if s < 3600:
        return f"{sign}{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{sign}{s // 3600}h {s % 3600 // 60}m"
    return f"{sign}{s // 86400}d {s % 86400 // 3600}h"


def _when(instant: datetime | None) -> str:
    return "–" if instant is None else instant.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


class _Shown(str):
    """Text made inert already, its line breaks kept on purpose (:func:`_pretty`)."""

    __slots__ = ()


def shown(value: Any) -> Any:
    """What a template renders for ``value`` (the Environment's ``finalize``): its text
    with every character that is not printable shown as its escape (``\\u202e``,
    :func:`tasks_core._inert.inert`); markup made here (already escaped) and
    :func:`_pretty` JSON (inert, its line breaks kept) as they are."""
    if isinstance(value, _Shown | Markup):
        return value
    return inert(value)


def _pretty(value: Any) -> str:
    """``value`` as indented JSON, inert: ``json.dumps`` escapes the control characters of
    its strings, so the line breaks left are its own; the format characters it keeps
    (``ensure_ascii=False``: U+202E…) are escaped line by line."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return _Shown("\n".join(inert(line) for line in text.split("\n")))


class Views:
    """The dashboard's views over one App, with the guard that signs its forms."""

    def __init__(self, app: App, guard: Guard) -> None:
        self.app = app
        self.guard = guard
        self.env = Environment(loader=PackageLoader("tasks_dashboard", "templates"),
                               autoescape=select_autoescape(default=True,
                                                            default_for_string=True),
                               finalize=shown)
        self.env.filters.update(age=_age, when=_when, pretty=_pretty)

    def render(self, request: Request, template: str, status: int = 200,
               headers: Mapping[str, str] | None = None, **context: Any) -> HTMLResponse:
        """``template`` rendered with the page's links, CSRF token and ``context``."""

        def link(name: str, **params: Any) -> str:
            query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
            return request.url_for(name).path + (f"?{query}" if query else "")

        def static(path: str) -> str:
            return request.url_for("static", path=path).path

        html = self.env.get_template(template).render(
            link=link, static=static, csrf_field=CSRF_FIELD, csrf=self.guard.csrf_token(request),
            login=self.guard.login_enabled, now=datetime.now(UTC), **context)
        return HTMLResponse(html, status, headers=headers)

    # -- pages ---------------------------------------------------------------------------

    async def queues(self, request: Request) -> Response:
        """Counts by status per queue, oldest pending age, finished in the last hour."""
        overview = await _reads.overview(self.app, SYSTEM, self.app.queues)
        return self.render(request, "queues.html", overview=overview,
                           statuses=[s.value for s in _reads.STATUSES], cap=_reads.COUNT_CAP,
                           recent=_reads.RECENT_PAGE, oldest=_reads.OLDEST_PAGE)

    async def tasks(self, request: Request) -> Response:
        """Tasks newest first (random ids) or keyed tasks in id order, filtered. Newest
        first reaches every task: with nothing to show on its first page it shows the
        keyed tasks instead (saying so), and its last page leads on to them when some
        match (one read of the keyed listing; none when the store's counts say no task
        matches).

        Raises:
            InvalidInput: an unknown status.
        """
        q = request.query_params
        status = q.get("status") or None
        statuses = [TaskStatus(status)] if status in {s.value for s in TaskStatus} else None
        if status and statuses is None:
            raise InvalidInput(f"unknown status {status!r}")
        queue, owner, key = q.get("queue") or None, q.get("owner") or None, q.get("key") or None
        tenant = q.get("tenant") or None
        authority = System(tenant) if tenant else SYSTEM
        view = "keyed" if key or q.get("view") == "keyed" else "recent"
        principal = Owner(owner, tenant or DEFAULT_TENANT) if owner else None

        def keep(task: Snapshot) -> bool:
            if principal is not None and task.owner != principal:
                return False  # a watcher only (the store lists owners and watchers)
            return key is None or task.id == key or task.id.endswith(f"::{key}")

        wanted = keep if owner or key else None

        async def keyed_tasks(after: str | None, limit: int) -> _reads.Listing:
            return await _reads.keyed(self.app, authority, statuses=statuses, queue=queue,
                                      principal=principal, after=after, limit=limit,
                                      keep=wanted)

        instead = keyed_next = False
        if view == "recent":
            before = q.get("before") or None
            total = None if wanted else await self._matching(authority, statuses, queue)
            listing = await _reads.newest(self.app, authority, statuses=statuses,
                                          queue=queue, principal=principal, before=before,
                                          limit=PAGE_SIZE, keep=wanted, total=total)
            if listing.next is None and not listing.exhausted and total != 0:
                if listing.items or before is not None:  # the last page: keyed ones next?
                    keyed_next = bool((await keyed_tasks(None, 1)).items)
                else:
                    view, instead = "keyed", True
        if view == "keyed":
            listing = await keyed_tasks(q.get("after") or None, PAGE_SIZE)
        filters = {"status": status, "queue": queue, "owner": owner, "tenant": tenant,
                   "key": key}
        return self.render(request, "tasks.html", listing=listing, view=view,
                           filters=filters, statuses=[s.value for s in TaskStatus],
                           queues=sorted(self.app.queues), instead=instead,
                           keyed_next=keyed_next)

    async def _matching(self, authority: System, statuses: list[TaskStatus] | None,
                        queue: str | None) -> int | None:
        """How many tasks the filters match, when the store counts (else ``None``)."""
        counts = await _reads.counted(self.app, authority)
        if counts is None:
            return None
        return sum(n for (q, status), n in counts.items()
                   if (queue is None or q == queue) and (statuses is None or status in statuses))

    async def task(self, request: Request) -> Response:
        """A task: its snapshot, history, live progress, input request and actions.

        Raises:
            TaskNotFound: no such task.
        """
        task_id = request.query_params.get("id", "")
        snapshot = await self.app.get(task_id, SYSTEM)
        history = await self.app.history(task_id, SYSTEM)
        return self.render(request, "task.html", task=snapshot, history=history)

    async def task_events(self, request: Request) -> Response:
        """Server-sent events: the task's status and progress after every change, until it
        ends (``event: end``). Rule: once the stream has begun, a failure of the tasks API
        (the store lost: ``StoreUnavailable``; the task deleted) ends it the same way, its
        data ``{"error": "Type: message"}`` (the page stops listening and shows it), logged
        as one WARNING line without a traceback — a response already begun cannot become
        an error page.

        Raises:
            TaskNotFound: no such task (before the stream begins).
            StoreUnavailable: the store failed (before the stream begins).
        """
        task_id = request.query_params.get("id", "")
        await self.app.get(task_id, SYSTEM)

        async def stream() -> AsyncIterator[str]:
            ended: dict[str, str] = {}
            try:
                async for snapshot in self.app.watch(task_id, SYSTEM):
                    progress = snapshot.progress
                    data = {"status": snapshot.status.value, "revision": snapshot.revision,
                            "progress": progress.value if progress else None,
                            "message": inert(progress.message)
                            if progress and progress.message else None}
                    yield f"data: {json.dumps(data)}\n\n"
            except TasksError as exc:
                ended["error"] = inert(f"{type(exc).__name__}: {exc}")
                log.warning("the live events of task %s ended: %s", inert(task_id),
                            ended["error"])
            yield f"event: end\ndata: {json.dumps(ended)}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    async def workers(self, request: Request) -> Response:
        """Workers by their live leases, with their last heartbeat."""
        rows, capped = await _reads.workers(self.app, SYSTEM)
        return self.render(request, "workers.html", workers=rows, capped=capped,
                           budget=_reads.SCAN_BUDGET)

    # -- actions -------------------------------------------------------------------------

    def _back(self, request: Request, task_id: str) -> Response:
        target = request.url_for("task").path + "?" + urlencode({"id": task_id})
        return RedirectResponse(target, status_code=303)

    async def cancel(self, request: Request) -> Response:
        """Cancel the task named by the form.

        Raises:
            HTTPException: 403 without the CSRF token; 400, 413, 415 a form
                :func:`~tasks_dashboard._forms.checked_form` refuses.
            TaskNotFound: no such task.
        """
        form = await checked_form(self.guard, request, SMALL_FORM_BYTES)
        task_id = form.get("id", "")
        await self.app.cancel(task_id, SYSTEM)
        return self._back(request, task_id)

    async def respond(self, request: Request) -> Response:
        """Answer one input request of the task: the answer is read as ``tasks respond``
        reads one (:func:`tasks_core._json.parse_answer`: JSON, else the text typed).

        Raises:
            HTTPException: 403 without the CSRF token; 400, 413, 415 a form
                :func:`~tasks_dashboard._forms.checked_form` refuses.
            TaskNotFound: no such task.
            InvalidInput: a bad key or answer, no answer at all (a form without the field
                is not an empty answer), or no open question of that key (answered
                already, or never asked: nothing changed, as ``tasks respond`` says).
        """
        form = await checked_form(self.guard, request, answer_form_bytes(self.app.limits))
        task_id, key = form.get("id", ""), form.get("key", "")
        given = form.get("answer")
        if given is None:
            raise InvalidInput("the form holds no answer")
        answer = parse_answer(given, "the answer")
        result = await self.app.respond(task_id, {key: answer}, SYSTEM)
        if result.outcome == "unchanged":
            raise InvalidInput("no open question of this task has that key (answered "
                               "already, or never asked); nothing changed")
        return self._back(request, task_id)

    # -- login ---------------------------------------------------------------------------

    def login_page(self, request: Request, status: int = 200, error: str = "",
                   next_to: str = "") -> Response:
        """The token form (also the answer to a request without credentials, which it
        returns to after the login: ``next``)."""
        if not next_to and status == 401 and not error:  # a refused page: come back to it
            query = request.url.query
            next_to = request.url.path + (f"?{query}" if query else "")
        return self.render(request, "login.html", status, error=error, login_page=True,
                           next=next_to)

    async def login(self, request: Request) -> Response:
        """GET: the form. POST: compare the token; on a match set the session cookie and
        return to ``next`` (:func:`~tasks_dashboard._security.next_path`).

        Raises:
            HTTPException: 403 without the CSRF token; 400, 413, 415 a form
                :func:`~tasks_dashboard._forms.checked_form` refuses.
            BadNext: a ``next`` outside the dashboard.
            TooManyFailedLogins: past the throttle of failed logins.
        """
        if request.method != "POST":
            return self.login_page(request, next_to=request.query_params.get("next", ""))
        form = await checked_form(self.guard, request, SMALL_FORM_BYTES)
        given_next = form.get("next", "")
        target = next_path(given_next, request.scope.get("root_path", ""))
        if not self.guard.login(form.get("token", ""), "form", request):
            return self.login_page(request, 401, "That is not the operator token.",
                                   next_to=given_next)
        response = RedirectResponse(target, status_code=303)
        path = request.scope.get("root_path") or "/"
        response.headers.append("set-cookie", cookie(
            self.guard.auth_cookie, self.guard.session_cookie(), path, max_age=SESSION_S,
            secure=request.url.scheme == "https"))
        return response

    async def logout(self, request: Request) -> Response:
        """End the session: refused from now on, even to a copy of its cookie, and the
        cookie dropped.

        Raises:
            HTTPException: 403 without the CSRF token; 400, 413, 415 a form
                :func:`~tasks_dashboard._forms.checked_form` refuses.
        """
        await checked_form(self.guard, request, SMALL_FORM_BYTES)
        self.guard.end_session(request.cookies.get(self.guard.auth_cookie))
        response = RedirectResponse(request.url_for("login").path, status_code=303)
        path = request.scope.get("root_path") or "/"
        response.headers.append("set-cookie", cookie(self.guard.auth_cookie, "", path,
                                                     max_age=0))
        return response

