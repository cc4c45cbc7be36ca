"""Who may use the dashboard: the checks :class:`~tasks_dashboard._gate.Gate` makes.

The gate wraps the whole ASGI app, static files included: a request passes with the
operator token (an ``Authorization: Bearer`` header, or the signed session cookie that the
login form sets after a constant-time comparison) or when the embedding app's
``authorize(request)`` says yes; views act as ``System()`` only behind it. Before that, a
dashboard given ``allowed_hosts`` refuses any other Host header (DNS rebinding), and past
:data:`FAILED_LOGINS` failed logins a minute (:class:`Throttle`) a token is refused without
being compared. Forms carry a CSRF token (an HMAC of the browser's random CSRF cookie under
a per-process secret) that :mod:`~tasks_dashboard._forms` checks on every POST (with the
POST's origin and size). Cookies are HttpOnly and SameSite=Strict, named per dashboard.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import ipaddress
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from tasks_core._inert import inert

__all__ = ["FAILED_LOGINS", "Authorize", "BadNext", "DashboardConfigError", "Guard",
           "HostRefused", "Throttle", "TooManyFailedLogins", "allowed_host_names", "cookie",
           "loopback_hosts", "next_path", "same_text"]

log = logging.getLogger("tasks_dashboard")

Authorize = Callable[[Request], bool | Awaitable[bool]]
"""The embedding app's check of a request: ``True`` lets it through."""

AUTH_COOKIE = "tasks_dashboard_auth"
CSRF_COOKIE = "tasks_dashboard_csrf"
"""Prefixes of the cookie names: each dashboard adds its own suffix (:class:`Guard`)."""
CSRF_FIELD = "csrf_token"
SESSION_S = 12 * 3600
LOGIN_PATH = "/login"
MAX_TOKEN_CHARS = 1024
"""The longest operator token: one the login form (its body capped,
:data:`~tasks_dashboard._forms.SMALL_FORM_BYTES`) always carries."""
FAILED_LOGINS = 10
"""Failed logins (form or Bearer) a process takes per :data:`THROTTLE_S`; past them a
login is refused (429) without comparing the token."""
THROTTLE_S = 60.0
BEARER_STATE = "tasks_dashboard_bearer"
"""The request state the gate sets when it let a request in by its Bearer token."""
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")

class DashboardConfigError(ValueError):
    """The dashboard was built without a way to tell operators from strangers (no token
    and no ``authorize`` callback), or with a bad one."""


class HostRefused(HTTPException):
    """A request whose Host header is not one the dashboard answers to (400): a page of
    another site reaching a loopback dashboard through DNS rebinding sends its own name."""

    def __init__(self, allowed: Iterable[str]) -> None:
        names = ", ".join(f"[{n}]" if ":" in n else n for n in sorted(allowed))
        super().__init__(400, f"bad Host header: this dashboard answers only to {names}")


class TooManyFailedLogins(HTTPException):
    """A login refused without comparing its token (429): the process took
    :data:`FAILED_LOGINS` failed logins within the last :data:`THROTTLE_S` seconds."""

    def __init__(self) -> None:
        super().__init__(429, "too many failed logins, wait a minute",
                         headers={"retry-after": str(int(THROTTLE_S))})


def loopback_hosts(bind: str) -> frozenset[str] | None:
    """The Host names a dashboard bound to the address ``bind`` answers to: on a loopback
    address (``127.0.0.1``, ``::1``, ``localhost``…) the loopback names and ``bind``
    itself; ``None`` (no check) on any other, reached under names it cannot know."""
    name = bind.strip("[]").lower()
    try:
        loopback = name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = False
    return frozenset({*LOOPBACK_NAMES, name}) if loopback else None


def allowed_host_names(hosts: Iterable[str] | None) -> frozenset[str] | None:
    """``hosts`` as the set of names :class:`Gate` compares a Host header's name with
    (lower case, an IPv6 address without brackets); ``None``: no check.

    Raises:
        DashboardConfigError: ``hosts`` is a string or holds an empty or non-string name.
    """
    if hosts is None:
        return None
    if isinstance(hosts, str) or not all(isinstance(h, str) and h.strip("[]") for h in hosts):
        raise DashboardConfigError("allowed_hosts must be a collection of host names, e.g. "
                                   "loopback_hosts('127.0.0.1'), or None")
    return frozenset(h.strip("[]").lower() for h in hosts)


class BadNext(HTTPException):
    """A login's ``next`` that is not a path inside the dashboard (400): a login never
    sends the browser elsewhere (no open redirect)."""

    def __init__(self) -> None:
        super().__init__(400, "next must be a path inside the dashboard, e.g. /tasks")


def next_path(given: str, root: str) -> str:
    """Where a login returns: ``given`` when it is a path inside the dashboard (mounted at
    ``root``, ``""`` at the top) — it begins with ``root + "/"``, never ``//`` nor a
    backslash, holds no ``.`` or ``..`` segment and no ``%2e``, ``%2f`` or ``%5c`` in its
    path (browsers read ``.%2e`` as ``..``; its query may hold any), no scheme or control
    character — else the queues
    (``root + "/"``) when ``given`` is empty.

    Raises:
        BadNext: anything else.
    """
    if not given:
        return root + "/"
    lowered = given.lower()
    path = lowered.partition("?")[0]
    if not given.startswith(root + "/") or given.startswith("//") or "\\" in given \
            or not given.isprintable() or "%2e" in path or "%2f" in path \
            or "%5c" in path or ":" in path \
            or any(segment in (".", "..") for segment in path.split("/")):
        raise BadNext()
    return given


def host_name(header: str) -> str:
    """The name of a Host header: without its port and an IPv6 address's brackets. Rule:
    a header is ``name``, ``name:port`` or ``[address]`` with an optional ``:port``, the
    port digits; anything else (``[::1]evil.com``, ``[::1].evil.com:80``, ``host:80x``)
    names no host: ``""``, which no dashboard answers to."""
    header = header.lower()
    if header.startswith("["):
        name, bracket, port = header[1:].partition("]")
    elif ":" in header:
        name, bracket, port = header.rpartition(":")
        port = ":" + port
    else:
        return header
    return name if bracket and (not port or (port[:1] == ":" and port[1:].isdigit())) else ""


class Throttle:
    """Failed logins of the process: at most :data:`FAILED_LOGINS` in any
    :data:`THROTTLE_S` seconds (of ``clock``) are taken; each is logged at WARNING (the
    way and the client, never the token given).

    Raises:
        TooManyFailedLogins: from :meth:`check`, past the limit.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: deque[float] = deque()

    def _recent(self) -> int:
        since = self._clock() - THROTTLE_S
        while self._failures and self._failures[0] <= since:
            self._failures.popleft()
        return len(self._failures)

    def check(self) -> None:
        """Refuse a login now, before its token is compared, past the limit.

        Raises:
            TooManyFailedLogins: :data:`FAILED_LOGINS` failures within the window.
        """
        if self._recent() >= FAILED_LOGINS:
            raise TooManyFailedLogins()

    def failed(self, how: str, client: str) -> None:
        """Count a failed login (``how``: the form or a Bearer header) and log it, the
        client's address escaped (:func:`tasks_core._inert.inert`: a proxy's header, where
        one is trusted, is text a client chose)."""
        self._failures.append(self._clock())
        log.warning("failed login to the dashboard (%s) from %s: %d in the last %d s",
                    how, inert(client), self._recent(), int(THROTTLE_S))


class Guard:
    """The operator token or ``authorize`` callback, and the per-process secret that signs
    session cookies and CSRF tokens.

    Raises:
        DashboardConfigError: neither ``token`` nor ``authorize``, an empty, short or
            overlong token or one that is not printable ASCII (what a Bearer header
            carries), or an ``authorize`` that cannot be called.
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
        if token is not None and not (token.isascii() and token.isprintable()):
            raise DashboardConfigError("the operator token must be printable ASCII: a "
                                       "Bearer header cannot carry any other character")
        if token is not None and len(token) > MAX_TOKEN_CHARS:
            raise DashboardConfigError(f"the operator token must be at most "
                                       f"{MAX_TOKEN_CHARS} characters")
        if authorize is not None and not callable(authorize):
            raise DashboardConfigError("authorize must be a callable: authorize(request) "
                                       "-> bool")
        self.token = token.encode() if token is not None else None
        self.authorize = authorize
        self._secret = secrets.token_bytes(32)
        self.throttle = Throttle()
        suffix = self._mac("cookie", "name")[:8]
        self.auth_cookie = f"{AUTH_COOKIE}_{suffix}"
        """This dashboard's own cookie names: two dashboards on one host (cookies ignore
        the port) never overwrite each other's."""
        self.csrf_cookie = f"{CSRF_COOKIE}_{suffix}"
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

    def login(self, given: str, how: str, request: Request) -> bool:
        """Whether ``given``, a login (``how``: ``"form"`` or ``"bearer"``), is the operator
        token; a failure counts towards the :class:`Throttle`.

        Raises:
            TooManyFailedLogins: past the throttle's limit (``given`` is not compared).
        """
        self.throttle.check()
        if self.token_matches(given):
            return True
        self.throttle.failed(how, request.client.host if request.client else "unknown")
        return False

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
                or not same_text(mac, self._mac("auth", body)):
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
            TooManyFailedLogins: a Bearer token past the throttle's limit. A callback's
                exception is logged and read as "no".
        """
        if self.token is not None:
            given = self._bearer_token(request)
            if given is not None and self.login(given, "bearer", request):
                request.scope.setdefault("state", {})[BEARER_STATE] = True
                return True
            cookie = request.cookies.get(self.auth_cookie)
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
            self.csrf_cookie, "")
        return self._mac("csrf", sid)

    @staticmethod
    def _bearer_token(request: Request) -> str | None:
        """The token of ``request``'s ``Authorization: Bearer`` header, if any."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return given.strip() if scheme.lower() == "bearer" else None

    @staticmethod
    def let_in_by_bearer(request: Request) -> bool:
        """Whether :meth:`allows` let ``request`` in by its Bearer token (compared there,
        under the throttle; the login form passes the gate without one, and a Bearer
        header on it is never compared: no oracle beside the throttle)."""
        return bool(request.scope.get("state", {}).get(BEARER_STATE))

    def csrf_matches(self, request: Request, given: str | None) -> bool:
        """Whether ``given``, a form's CSRF token, is the one of ``request``'s CSRF cookie
        (constant time; no cookie matches nothing)."""
        sid = request.cookies.get(self.csrf_cookie, "")
        return bool(sid) and given is not None and same_text(given, self._mac("csrf", sid))


def same_text(given: str, expected: str) -> bool:
    """Whether ``given`` (from the client: any text) is ``expected``, in constant time
    (``hmac.compare_digest`` of their UTF-8 bytes: of ``str`` it refuses non-ASCII)."""
    return hmac.compare_digest(given.encode(), expected.encode())


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
