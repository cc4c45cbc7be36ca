"""The ASGI middleware every request passes: :class:`Gate`.

It refuses a Host header outside ``allowed_hosts``, lets a request in only when
:meth:`~tasks_dashboard._security.Guard.allows` it (the login form excepted), refuses a
POST a browser marks as from another origin (:func:`~tasks_dashboard._forms.check_origin`),
sets the CSRF cookie once, and puts :data:`SECURITY_HEADERS` on every response, a 500 of
an unexpected failure included.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tasks_dashboard._forms import CrossOrigin, check_origin
from tasks_dashboard._security import (
    LOGIN_PATH,
    Guard,
    HostRefused,
    TooManyFailedLogins,
    cookie,
    host_name,
)

__all__ = ["OPERATOR", "SECURITY_HEADERS", "Gate"]

OPERATOR = "tasks_dashboard_operator"
"""The request state the gate sets on every request it lets in: whether it was let in as
an operator (``False``: a visitor's login form), so an error page links static files only
for an operator."""
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",  # no-referrer would make a POST's Origin "null"
    "cache-control": "no-store",
    "cross-origin-opener-policy": "same-origin",
}



class Gate:
    """ASGI middleware: security headers on every response, a Host header outside
    ``allowed_hosts`` (when given) refused, the CSRF cookie set once, every request but
    the login form refused unless :meth:`Guard.allows` it (:data:`OPERATOR` says which),
    and a POST from another origin refused before its body is read.

    Raises:
        Exception: an unexpected failure of the app, after a plain 500 with the headers
            (for the server to log); its refusals (:class:`HostRefused`,
            :class:`TooManyFailedLogins`, :class:`CrossOrigin`, 401, 403) are responses.
    """

    def __init__(self, app: ASGIApp, guard: Guard,
                 login_page: Callable[[Request, int], Response],
                 allowed_hosts: frozenset[str] | None = None) -> None:
        self.app = app
        self.guard = guard
        self.login_page = login_page
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        csrf_cookie = self.guard.csrf_cookie
        new_sid = None if csrf_cookie in request.cookies else secrets.token_hex(16)
        if new_sid:
            scope.setdefault("state", {})["csrf_sid"] = new_sid
        path = scope.get("root_path", "") or "/"

        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                if new_sid:
                    headers.append("set-cookie", cookie(csrf_cookie, new_sid, path,
                                                         secure=scope["scheme"] == "https"))
            await send(message)

        try:
            await self._guarded(scope, receive, request, send_with_headers)
        except Exception:
            if not started:  # the server's own 500 would go out without the headers
                await PlainTextResponse("Internal Server Error", 500)(
                    scope, receive, send_with_headers)
            raise

    async def _guarded(self, scope: Scope, receive: Receive, request: Request,
                       send_with_headers: Send) -> None:
        try:
            if self.allowed_hosts is not None and host_name(
                    request.headers.get("host", "")) not in self.allowed_hosts:
                raise HostRefused(self.allowed_hosts)
            route = scope["path"][len(scope.get("root_path", "")):] or "/"
            visitor = route == LOGIN_PATH and self.guard.login_enabled  # anyone's form
            allowed = visitor or await self.guard.allows(request)
            if allowed:
                check_origin(request)
        except (HostRefused, TooManyFailedLogins, CrossOrigin) as refused:
            response: Response = PlainTextResponse(refused.detail, refused.status_code,
                                                   headers=refused.headers)
            await response(scope, receive, send_with_headers)
            return
        if not allowed:
            response = self._refusal(request)
            await response(scope, receive, send_with_headers)
            return
        scope.setdefault("state", {})[OPERATOR] = not visitor
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, request: Request) -> Response:
        if not self.guard.login_enabled:
            return PlainTextResponse("forbidden: the application refused this request", 403)
        if request.method in ("GET", "HEAD") and "text/html" in request.headers.get(
                "accept", ""):
            response = self.login_page(request, 401)
        else:
            response = PlainTextResponse("operator token required", 401)
        response.headers["www-authenticate"] = 'Bearer realm="tasks-dashboard"'
        return response
