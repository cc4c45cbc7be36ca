"""Who may use the dashboard, and what every response carries.

:class:`Gate` wraps the whole ASGI app, static files included: a request passes with the
operator token (an ``Authorization: Bearer`` header, or the signed session cookie that the
login form sets after a constant-time comparison) or when the embedding app's
``authorize(request)`` says yes; views act as ``System()`` only behind it. Forms carry a
CSRF token (an HMAC of the browser's random CSRF cookie under a per-process secret) that
:meth:`Guard.form` checks on every POST. Cookies are HttpOnly and SameSite=Strict; every
response has a CSP without inline scripts or styles, and is never cached.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.datastructures import FormData, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["SECURITY_HEADERS", "Authorize", "DashboardConfigError", "Gate", "Guard"]

log = logging.getLogger("tasks_dashboard")

Authorize = Callable[[Request], bool | Awaitable[bool]]
"""The embedding app's check of a request: ``True`` lets it through."""

AUTH_COOKIE = "tasks_dashboard_auth"
CSRF_COOKIE = "tasks_dashboard_csrf"
CSRF_FIELD = "csrf_token"
SESSION_S = 12 * 3600
LOGIN_PATH = "/login"

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    "cross-origin-opener-policy": "same-origin",
}


class DashboardConfigError(ValueError):
    """The dashboard was built without a way to tell operators from strangers (no token
    and no ``authorize`` callback), or with a bad one."""


class Guard:
    """The operator token or ``authorize`` callback, and the per-process secret that signs
    session cookies and CSRF tokens.

    Raises:
        DashboardConfigError: neither ``token`` nor ``authorize``, an empty or short
            token, or an ``authorize`` that cannot be called.
    """

    def __init__(self, *, token: str | None, authorize: Authorize | None) -> None:
        if token is None and authorize is None:
            raise DashboardConfigError(
                "the dashboard needs an operator token (token=..., `tasks dashboard "
                "--token` or TASKS_DASHBOARD_TOKEN) or an authorize(request) callback; "
                "it never serves tasks to anyone who asks")
        if token is not None and (not isinstance(token, str) or len(token) < 8):
            raise DashboardConfigError("the operator token must be a string of at least 8 "
                                       "characters")
        if token is not None and (not token.strip() or token != token.strip()):
            raise DashboardConfigError("the operator token must not be blank nor begin or "
                                       "end with whitespace")
        if authorize is not None and not callable(authorize):
            raise DashboardConfigError("authorize must be a callable: authorize(request) "
                                       "-> bool")
        self.token = token.encode() if token is not None else None
        self.authorize = authorize
        self._secret = secrets.token_bytes(32)
        self._ended: dict[str, float] = {}
        """Sessions ended by a logout: their id and when they would have expired."""

    @property
    def login_enabled(self) -> bool:
        """Whether operators log in with the token (a token was given)."""
        return self.token is not None

    def _mac(self, purpose: str, value: str) -> str:
        message = f"{purpose}:{value}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def token_matches(self, given: str) -> bool:
        """Whether ``given`` is the operator token (constant time)."""
        return self.token is not None and hmac.compare_digest(given.encode(), self.token)

    def session_cookie(self) -> str:
        """A fresh session cookie value: the instant it was issued and a random session
        id, signed."""
        body = f"{int(time.time())}.{secrets.token_hex(16)}"
        return f"{body}.{self._mac('auth', body)}"

    def _session(self, value: str) -> tuple[int, str] | None:
        """``(issued, session id)`` of a cookie this process signed, else ``None``."""
        body, _, mac = value.rpartition(".")
        issued, _, sid = body.partition(".")
        if not issued.isdigit() or not sid \
                or not hmac.compare_digest(mac, self._mac("auth", body)):
            return None
        return int(issued), sid

    def _session_valid(self, value: str) -> bool:
        session = self._session(value)
        return (session is not None and 0 <= time.time() - session[0] < SESSION_S
                and session[1] not in self._ended)

    def end_session(self, value: str | None) -> None:
        """Refuse the session of cookie ``value`` from now on (logout): a copy of the cookie
        no longer lets anyone in. An ended session is remembered until it would have
        expired anyway."""
        session = None if value is None else self._session(value)
        if session is None:
            return
        now = time.time()
        self._ended = {sid: until for sid, until in self._ended.items() if until > now}
        self._ended[session[1]] = session[0] + SESSION_S

    async def allows(self, request: Request) -> bool:
        """Whether ``request`` comes from an operator. A failing callback says no.

        Raises:
            Nothing: a callback's exception is logged and read as "no".
        """
        if self.token is not None:
            if self._bearer(request):
                return True
            cookie = request.cookies.get(AUTH_COOKIE)
            if cookie and self._session_valid(cookie):
                return True
        if self.authorize is not None:
            try:
                answer = self.authorize(request)
                if inspect.isawaitable(answer):
                    answer = await answer
            except Exception:
                log.exception("the dashboard's authorize callback failed; request refused")
                return False
            return answer is True
        return False

    def csrf_token(self, request: Request) -> str:
        """The CSRF token the forms of ``request``'s page carry."""
        sid = request.scope.get("state", {}).get("csrf_sid") or request.cookies.get(
            CSRF_COOKIE, "")
        return self._mac("csrf", sid)

    def _bearer(self, request: Request) -> bool:
        """Whether ``request`` carries the operator token as ``Authorization: Bearer``."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(given.strip())

    async def form(self, request: Request) -> FormData:
        """The POSTed form, once its CSRF token matches the browser's cookie. A request
        that carries the operator token as ``Authorization: Bearer`` needs none: browsers
        never send that header on their own. Any other ``Authorization`` (HTTP Basic
        accepted by an ``authorize`` callback: browsers do resend cached credentials) needs
        the token like a session cookie.

        Raises:
            HTTPException: 403 without a matching CSRF token.
        """
        form = await request.form()
        if self._bearer(request) and AUTH_COOKIE not in request.cookies:
            return form
        sid = request.cookies.get(CSRF_COOKIE, "")
        given = form.get(CSRF_FIELD)
        if not sid or not isinstance(given, str) \
                or not hmac.compare_digest(given, self._mac("csrf", sid)):
            raise HTTPException(403, "missing or wrong CSRF token: reload the page and "
                                     "try again")
        return form


class Gate:
    """ASGI middleware: security headers on every response, the CSRF cookie set once, and
    every request but the login form refused unless :meth:`Guard.allows` it."""

    def __init__(self, app: ASGIApp, guard: Guard,
                 login_page: Callable[[Request, int], Response]) -> None:
        self.app = app
        self.guard = guard
        self.login_page = login_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        new_sid = None if CSRF_COOKIE in request.cookies else secrets.token_hex(16)
        if new_sid:
            scope.setdefault("state", {})["csrf_sid"] = new_sid
        path = scope.get("root_path", "") or "/"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                if new_sid:
                    headers.append("set-cookie", cookie(CSRF_COOKIE, new_sid, path,
                                                         secure=scope["scheme"] == "https"))
            await send(message)

        route = scope["path"][len(scope.get("root_path", "")):] or "/"
        if route == LOGIN_PATH and self.guard.login_enabled:
            await self.app(scope, receive, send_with_headers)
            return
        if not await self.guard.allows(request):
            response = self._refusal(request)
            await response(scope, receive, send_with_headers)
            return
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


def cookie(name: str, value: str, path: str, *, max_age: int | None = None,
           secure: bool = False) -> str:
    """A ``Set-Cookie`` value: HttpOnly, SameSite=Strict, scoped to the dashboard's path
    (and Secure when the dashboard is served over HTTPS)."""
    parts: list[Any] = [f"{name}={value}", f"Path={path}", "HttpOnly", "SameSite=Strict"]
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)
