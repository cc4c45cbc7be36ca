"""The dashboard's guards beyond the token: the Host header on a loopback dashboard (DNS
rebinding), the throttle of failed logins, cookie names of their own per dashboard, and
the page a login returns to."""

from __future__ import annotations

import logging
import re
import socket

import httpx
import pytest
from conftest import BEARER, TOKEN
from starlette.applications import Starlette
from tasks_core import App
from tasks_core.cli.main import run
from tasks_core.errors import InvalidInput
from tasks_dashboard import DashboardConfigError, create_app, loopback_hosts
from tasks_dashboard._security import FAILED_LOGINS, Throttle, TooManyFailedLogins

pytestmark = pytest.mark.anyio


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def _free_port() -> int:
    """A port nothing listens on now (the command binds it itself)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def client_of(web: Starlette, base_url: str = "http://127.0.0.1:8000") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=web), base_url=base_url)


async def test_a_loopback_dashboard_refuses_other_host_names(app: App) -> None:
    """Served on a loopback address, the dashboard MUST answer 400 to a request whose Host
    is not a loopback name (a DNS-rebinding page sends its own name), before any login;
    every loopback name, with any port, passes."""
    web = create_app(app, token=TOKEN, allowed_hosts=loopback_hosts("127.0.0.1"))
    async with client_of(web) as client:
        for host in ("127.0.0.1", "127.0.0.1:8000", "localhost", "LOCALHOST:1", "[::1]:8000",
                     "[::1]"):
            response = await client.get("/", headers={**BEARER, "host": host})
            assert 200 == response.status_code, host
        for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example",
                     "localhost.", "[::2]:8000", ""):
            response = await client.get("/login", headers={"host": host})
            assert 400 == response.status_code, host
            assert "Host" in response.text
            assert "nosniff" == response.headers["x-content-type-options"]


def test_only_a_loopback_bind_address_checks_the_host() -> None:
    """The CLI's rule: a loopback bind address answers loopback names only (and itself);
    any other address (a LAN or public one, 0.0.0.0) is reached under names the dashboard
    cannot know, so no check."""
    assert {"127.0.0.1", "localhost", "::1"} <= set(loopback_hosts("127.0.0.1") or ())
    assert "127.0.0.2" in (loopback_hosts("127.0.0.2") or ())
    assert loopback_hosts("::1") is not None
    assert loopback_hosts("localhost") is not None
    assert loopback_hosts("0.0.0.0") is None
    assert loopback_hosts("192.168.1.5") is None
    assert loopback_hosts("dash.example") is None


async def test_no_host_check_without_allowed_hosts(web: Starlette) -> None:
    """``allowed_hosts=None`` (the default, for an app mounted behind its own host
    handling) answers any Host."""
    async with client_of(web, "http://dash.example") as client:
        assert 200 == (await client.get("/", headers=BEARER)).status_code


async def test_allowed_hosts_must_be_names(app: App) -> None:
    with pytest.raises(DashboardConfigError, match="allowed_hosts"):
        create_app(app, token=TOKEN, allowed_hosts="localhost")
    with pytest.raises(DashboardConfigError, match="allowed_hosts"):
        create_app(app, token=TOKEN, allowed_hosts=[""])


@pytest.mark.parametrize(("host", "checked"), [("127.0.0.1", True), ("0.0.0.0", False)])
async def test_the_cli_checks_the_host_when_it_serves_on_loopback(
        monkeypatch: pytest.MonkeyPatch, host: str, checked: bool) -> None:
    """``tasks dashboard`` passes ``allowed_hosts`` from ``--host``: the loopback names on
    a loopback address (its default), no check on another."""
    import tasks_dashboard

    given: dict[str, object] = {}

    def capture(*args: object, **kwargs: object) -> None:
        given.update(kwargs)
        raise DashboardConfigError("captured")

    monkeypatch.setattr(tasks_dashboard, "create_app", capture)
    with pytest.raises(InvalidInput, match="captured"):
        await run(["dashboard", "--store", "memory://", "--token", TOKEN, "--host", host])
    assert (given["allowed_hosts"] is not None) is checked


async def test_the_cli_trusts_no_proxy_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tasks dashboard`` MUST serve with uvicorn's proxy headers off: a loopback
    dashboard's every client is 127.0.0.1, which uvicorn trusts by default, so any local
    process could name the address a failed login is logged with (``X-Forwarded-For``)."""
    import uvicorn

    given: dict[str, object] = {}

    def capture(*args: object, **kwargs: object) -> None:
        given.update(kwargs)
        raise InvalidInput("captured")

    monkeypatch.setattr(uvicorn, "Config", capture)
    with pytest.raises(InvalidInput, match="captured"):
        await run(["dashboard", "--store", "memory://", "--token", TOKEN, "--port",
                   str(_free_port())])
    assert given.get("proxy_headers") is False


async def test_failed_logins_are_throttled_and_logged(
        client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture) -> None:
    """Past FAILED_LOGINS failures (form or Bearer) a login MUST be refused with 429 before
    the token is compared — the right token too — and each failure is logged at WARNING
    without the token given."""
    caplog.set_level(logging.WARNING, logger="tasks_dashboard")
    csrf = csrf_of((await client.get("/login")).text)
    for attempt in range(FAILED_LOGINS):
        if attempt % 2:
            wrong = await client.get("/", headers={"authorization": f"Bearer guess-{attempt}"})
        else:
            wrong = await client.post("/login", data={"token": f"guess-{attempt}",
                                                      "csrf_token": csrf})
        assert 401 == wrong.status_code, attempt
    failures = [r for r in caplog.records if "failed login" in r.getMessage()]
    assert FAILED_LOGINS == len(failures)
    assert all(r.levelno == logging.WARNING for r in failures)
    assert not any("guess-" in r.getMessage() for r in caplog.records)
    throttled = await client.post("/login", data={"token": TOKEN, "csrf_token": csrf})
    assert 429 == throttled.status_code
    assert "too many failed logins" in throttled.text
    bearer = await client.get("/", headers=BEARER)
    assert 429 == bearer.status_code
    assert "too many failed logins" in bearer.text


async def test_a_bearer_header_on_the_login_form_is_no_token_oracle(
        client: httpx.AsyncClient) -> None:
    """A POST to the login form (which passes the gate without a token) MUST NOT compare a
    Bearer header it carries outside the throttle: the right and a wrong token get the same
    answer (the form's CSRF refusal), and the throttle, once tripped, still refuses the
    right Bearer token elsewhere."""
    answers = set()
    for given in ("wrong-token", TOKEN):
        response = await client.post("/login", headers={"authorization": f"Bearer {given}"})
        answers.add((response.status_code, response.text))
    assert 1 == len(answers), answers
    for attempt in range(FAILED_LOGINS):
        await client.get("/", headers={"authorization": f"Bearer guess-{attempt}"})
    for given in ("wrong-token", TOKEN):
        response = await client.post("/login", headers={"authorization": f"Bearer {given}"})
        answers.add((response.status_code, response.text))
    assert 1 == len({status for status, _ in answers}), answers


def test_a_failed_login_is_logged_with_its_client_address_escaped(
        caplog: pytest.LogCaptureFixture) -> None:
    """A failed login's log line MUST show the client's address with every character that
    is not printable escaped (an address comes from the connection, or from a proxy's
    header where one is trusted: text a client may choose)."""
    caplog.set_level(logging.WARNING, logger="tasks_dashboard")
    Throttle().failed("bearer", "\x9b2J\x1b]52;c;aGk=\x0710.9.9.9")
    [line] = [r.getMessage() for r in caplog.records if "failed login" in r.getMessage()]
    assert line.isprintable()
    assert "10.9.9.9" in line


def test_the_throttle_forgets_failures_after_its_window() -> None:
    now = [1000.0]
    throttle = Throttle(clock=lambda: now[0])
    for _ in range(FAILED_LOGINS):
        throttle.check()
        throttle.failed("form", "127.0.0.1")
    with pytest.raises(TooManyFailedLogins, match="too many failed logins"):
        throttle.check()
    now[0] += 59.0
    with pytest.raises(TooManyFailedLogins):
        throttle.check()
    now[0] += 1.5
    throttle.check()


async def test_two_dashboards_keep_their_own_cookies(app: App) -> None:
    """Two dashboards on one host (cookies ignore the port) MUST NOT log each other out:
    each names its session and CSRF cookies its own way, and logout drops its own."""
    first, second = create_app(app, token=TOKEN), create_app(app, token=TOKEN)
    jar = httpx.Cookies()
    names = []
    for web in (first, second):
        async with client_of(web) as client:
            client.cookies = jar
            csrf = csrf_of((await client.get("/login")).text)
            good = await client.post("/login", data={"token": TOKEN, "csrf_token": csrf})
            assert 303 == good.status_code
            names.append(sorted(good.cookies.keys()))
            jar = client.cookies
    assert names[0] != names[1]
    for web in (first, second):
        async with client_of(web) as client:
            client.cookies = jar
            assert 200 == (await client.get("/")).status_code
    async with client_of(first) as client:
        client.cookies = jar
        csrf = csrf_of((await client.get("/")).text)
        out = await client.post("/logout", data={"csrf_token": csrf})
        assert 303 == out.status_code
        assert names[0][0] in out.headers["set-cookie"]
        assert 401 == (await client.get("/")).status_code
    async with client_of(second) as client:
        client.cookies = jar
        assert 200 == (await client.get("/")).status_code


async def test_login_returns_to_the_page_asked_for(client: httpx.AsyncClient) -> None:
    """The login form of a refused page carries it as ``next``; a login returns there. A
    ``next`` that is not a path inside the dashboard is refused (no open redirect)."""
    asked = await client.get("/tasks?status=pending", headers={"accept": "text/html"})
    assert 401 == asked.status_code
    assert 'name="next" value="/tasks?status=pending"' in asked.text
    csrf = csrf_of(asked.text)
    for bad in ("https://evil.example/", "//evil.example/x", "/\\evil.example",
                "javascript:alert(1)", "tasks", "/\x00", "/.%2e/admin", "/%2e./admin",
                "/%2E%2e/admin", "/./admin", "/%2e/admin"):
        refused = await client.post("/login", data={"token": TOKEN, "csrf_token": csrf,
                                                    "next": bad})
        assert 400 == refused.status_code, bad
        assert "next" in refused.text
    good = await client.post("/login", data={"token": TOKEN, "csrf_token": csrf,
                                             "next": "/tasks?status=pending"})
    assert 303 == good.status_code
    assert "/tasks?status=pending" == good.headers["location"]
    plain = await client.post("/login", data={"token": TOKEN, "csrf_token": csrf})
    assert "/" == plain.headers["location"]


async def test_login_returns_to_a_page_whose_query_holds_a_slash(
        client: httpx.AsyncClient) -> None:
    """Only the path of ``next`` decides where a login goes: an encoded ``/`` or ``\\`` in
    its query (a key ``a/b`` in a filter, a task id) MUST NOT refuse the login, while the
    same in its path does."""
    csrf = csrf_of((await client.get("/login")).text)
    for wanted in ("/task?id=bob%3A%3Aa%2Fb", "/tasks?key=a%5Cb&queue=web"):
        good = await client.post("/login", data={"token": TOKEN, "csrf_token": csrf,
                                                 "next": wanted})
        assert 303 == good.status_code, wanted
        assert wanted == good.headers["location"]
    for bad in ("/%2f%2fevil.example", "/%5cevil.example"):
        refused = await client.post("/login", data={"token": TOKEN, "csrf_token": csrf,
                                                    "next": bad})
        assert 400 == refused.status_code, bad


async def test_an_error_page_for_a_visitor_links_no_static_file(
        client: httpx.AsyncClient) -> None:
    """An error page shown before the login (a refused ``next``, a missing CSRF token)
    MUST NOT link the static files a visitor may not load, as the login page does not."""
    csrf = csrf_of((await client.get("/login")).text)
    refused = await client.post("/login", data={"token": TOKEN, "csrf_token": csrf,
                                                "next": "//evil.example"})
    no_csrf = await client.post("/login", data={"token": TOKEN})
    for page in (refused, no_csrf):
        assert page.status_code in (400, 403)
        assert "/static/" not in page.text
    operator = await client.get("/task?id=missing", headers=BEARER)
    assert 404 == operator.status_code
    assert "/static/dashboard.css" in operator.text


async def test_a_host_header_with_anything_after_the_bracket_but_a_port_is_refused(
        app: App) -> None:
    """An IPv6 Host header MUST be ``[address]`` or ``[address]:port``: a name glued after
    the bracket (``[::1]evil.com``, ``[::1].evil.com:80``) is another host, refused with
    400 like any other; so is a port that is not a number."""
    web = create_app(app, token=TOKEN, allowed_hosts=loopback_hosts("127.0.0.1"))
    async with client_of(web) as client:
        for host in ("[::1]evil.com", "[::1].evil.com:80", "[::1]:80evil", "[::1]:",
                     "127.0.0.1:80x", "localhost:"):
            response = await client.get("/", headers={**BEARER, "host": host})
            assert 400 == response.status_code, host
        for host in ("[::1]:80", "[::1]", "localhost:8080"):
            response = await client.get("/", headers={**BEARER, "host": host})
            assert 200 == response.status_code, host
