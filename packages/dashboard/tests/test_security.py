"""The dashboard lets in operators only, protects its actions against cross-site
requests, and shows stored data as text."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from conftest import BEARER, TOKEN
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount
from tasks_core import App, Owner, System
from tasks_dashboard import DashboardConfigError, create_app
from tasks_dashboard._security import MAX_TOKEN_CHARS

pytestmark = pytest.mark.anyio

PAGES = ("/", "/tasks", "/tasks?view=keyed", "/workers", "/static/dashboard.css",
         "/static/live.js")


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def auth_cookie(client: httpx.AsyncClient) -> str:
    """The name of the session cookie ``client`` holds (each dashboard names its own)."""
    names = [n for n in client.cookies if n.startswith("tasks_dashboard_auth_")]
    assert 1 == len(names)
    return names[0]


async def test_no_token_and_no_callback_is_refused(app: App) -> None:
    """There is no open dashboard: neither a token nor a callback is a named error."""
    with pytest.raises(DashboardConfigError, match="operator token"):
        create_app(app)
    with pytest.raises(DashboardConfigError, match="at least 8"):
        create_app(app, token="short")
    for blank in (" " * 8, "\t" * 12, " secret-token", "secret-token\n"):
        # blank, or one a Bearer header (stripped) could never match
        with pytest.raises(DashboardConfigError, match="whitespace"):
            create_app(app, token=blank)


async def test_a_token_that_is_not_printable_ascii_is_refused(app: App) -> None:
    """A token a Bearer header cannot carry (beyond ASCII: a header arrives as bytes the
    server reads as Latin-1; a control character) MUST be refused when the dashboard is
    built — never a dashboard whose operators can never log in — and so is one longer
    than the login form takes."""
    for bad in ("tokén-with-accent", "token\x00-with-nul", "tab\tinside-token"):
        with pytest.raises(DashboardConfigError, match="printable ASCII"):
            create_app(app, token=bad)
    with pytest.raises(DashboardConfigError, match="at most"):
        create_app(app, token="t" * (MAX_TOKEN_CHARS + 1))
    web = create_app(app, token="t" * MAX_TOKEN_CHARS)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=web),
                                 base_url="http://dash") as client:
        ok = await client.get("/", headers={"authorization": "Bearer " + "t" * MAX_TOKEN_CHARS})
        assert 200 == ok.status_code


async def test_every_page_refuses_a_request_without_the_token(
        client: httpx.AsyncClient, app: App) -> None:
    """Pages, static files, the event stream and actions all answer 401."""
    submitted = await app.submit("steps", {"count": 1}, Owner("alice"))
    for path in (*PAGES, f"/task?id={submitted.id}", f"/task/events?id={submitted.id}"):
        response = await client.get(path)
        assert 401 == response.status_code, path
        assert TOKEN not in response.text
    response = await client.post("/task/cancel", data={"id": submitted.id})
    assert 401 == response.status_code
    assert "pending" == (await app.get(submitted.id, System())).status
    wrong = await client.get("/", headers={"authorization": "Bearer not-the-token"})
    assert 401 == wrong.status_code


async def test_a_browser_without_the_token_gets_the_login_form(
        client: httpx.AsyncClient) -> None:
    response = await client.get("/", headers={"accept": "text/html"})
    assert 401 == response.status_code
    assert 'name="token"' in response.text
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_login_sets_a_strict_httponly_session_cookie(client: httpx.AsyncClient) -> None:
    form = await client.get("/login")
    csrf = csrf_of(form.text)
    bad = await client.post("/login", data={"token": "nope-nope", "csrf_token": csrf})
    assert 401 == bad.status_code
    no_csrf = await client.post("/login", data={"token": TOKEN})
    assert 403 == no_csrf.status_code
    good = await client.post("/login", data={"token": TOKEN, "csrf_token": csrf})
    assert 303 == good.status_code
    cookie = good.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert TOKEN not in cookie
    assert 200 == (await client.get("/")).status_code
    logout = await client.post("/logout", data={"csrf_token": csrf})
    assert 303 == logout.status_code
    assert not [n for n in client.cookies if n.startswith("tasks_dashboard_auth")]
    assert 401 == (await client.get("/")).status_code


async def test_a_session_ends_at_logout_even_for_a_copy_of_its_cookie(
        client: httpx.AsyncClient) -> None:
    """Logging out MUST end the session on the server: a copy of its cookie (another tab,
    a stolen value) is refused afterwards, while another operator's session goes on."""
    async def session() -> str:
        csrf = csrf_of((await client.get("/login")).text)
        good = await client.post("/login", data={"token": TOKEN, "csrf_token": csrf})
        assert 303 == good.status_code
        return good.cookies[auth_cookie(client)]
    mine, other = await session(), await session()
    name = auth_cookie(client)
    csrf = csrf_of((await client.get("/login")).text)
    client.cookies.set(name, mine)
    assert 303 == (await client.post("/logout", data={"csrf_token": csrf})).status_code
    client.cookies.set(name, mine)  # the copy
    assert 401 == (await client.get("/")).status_code
    client.cookies.set(name, other)
    assert 200 == (await client.get("/")).status_code


async def test_a_post_without_the_csrf_token_is_refused(
        client: httpx.AsyncClient, app: App) -> None:
    """With the session cookie, cancel and respond need the form's CSRF token."""
    submitted = await app.submit("steps", {"count": 1}, Owner("alice"))
    page = await client.get("/login")
    await client.post("/login", data={"token": TOKEN, "csrf_token": csrf_of(page.text)})
    for action in ("/task/cancel", "/task/respond"):
        for data in ({"id": submitted.id}, {"id": submitted.id, "csrf_token": "forged"}):
            response = await client.post(action, data={**data, "key": "k", "answer": "1"})
            assert 403 == response.status_code, action
    assert "pending" == (await app.get(submitted.id, System())).status
    task_page = await client.get(f"/task?id={submitted.id}")
    ok = await client.post("/task/cancel",
                           data={"id": submitted.id, "csrf_token": csrf_of(task_page.text)})
    assert 303 == ok.status_code
    assert "cancelled" == (await app.get(submitted.id, System())).status


async def test_only_the_bearer_token_spares_a_post_its_csrf_token(app: App) -> None:
    """A POST needs no CSRF token only when it carries the operator token as ``Bearer``:
    HTTP Basic credentials an ``authorize`` callback accepts — which a browser resends by
    itself from a cross-site form — need the CSRF token like a session cookie."""
    def authorize(request: Request) -> bool:
        return request.headers.get("authorization") == "Basic b3BzOnB3"

    web = create_app(app, token=TOKEN, authorize=authorize)
    submitted = await app.submit("steps", {"count": 1}, Owner("alice"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=web),
                                 base_url="http://dash") as client:
        basic = await client.post("/task/cancel", data={"id": submitted.id},
                                  headers={"authorization": "Basic b3BzOnB3"})
        assert 403 == basic.status_code
        assert "pending" == (await app.get(submitted.id, System())).status
        bearer = await client.post("/task/cancel", data={"id": submitted.id}, headers=BEARER)
        assert 303 == bearer.status_code
    assert "cancelled" == (await app.get(submitted.id, System())).status


async def test_stored_markup_is_shown_as_text(client: httpx.AsyncClient, app: App) -> None:
    """A task input holding <script> is escaped on every page that shows it."""
    evil = "<script>alert('owned')</script>"
    submitted = await app.submit("ask", {"question": evil}, Owner("alice"))
    page = await client.get(f"/task?id={submitted.id}", headers=BEARER)
    assert 200 == page.status_code
    assert evil not in page.text
    assert "&lt;script&gt;alert(" in page.text
    assert "<script>" not in page.text.replace(
        '<script src="/static/live.js" defer></script>', "")


async def test_every_response_carries_the_security_headers(client: httpx.AsyncClient) -> None:
    for path in PAGES:
        response = await client.get(path, headers=BEARER)
        assert 200 == response.status_code, path
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert "nosniff" == response.headers["x-content-type-options"]
        assert "no-store" == response.headers["cache-control"]


async def test_the_authorize_callback_decides_every_request(app: App) -> None:
    """Mounted in the user's app: the callback is asked for pages and static files; its
    exception refuses; links carry the mount path."""
    asked: list[str] = []

    async def authorize(request: Request) -> bool:
        asked.append(request.url.path)
        if request.headers.get("x-user") == "boom":
            raise RuntimeError("broken")
        return request.headers.get("x-user") == "ops"

    outer = Starlette(routes=[Mount("/ops", create_app(app, authorize=authorize))])
    transport = httpx.ASGITransport(app=outer)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash") as c:
        assert 403 == (await c.get("/ops/")).status_code
        assert 403 == (await c.get("/ops/static/live.js")).status_code
        assert 403 == (await c.get("/ops/", headers={"x-user": "boom"})).status_code
        page = await c.get("/ops/", headers={"x-user": "ops"})
        assert 200 == page.status_code
        assert 'href="/ops/tasks"' in page.text
        assert 'src="/ops/static/live.js"' in page.text
        login = await c.get("/ops/login", headers={"x-user": "nobody"})
        assert 403 == login.status_code  # no login form without a token
    assert {"/ops/", "/ops/static/live.js"} <= set(asked)


@contextlib.asynccontextmanager
async def waiting_for_an_answer(client: httpx.AsyncClient, app: App) -> AsyncIterator[
        tuple[str, Callable[[dict[str, str]], Awaitable[httpx.Response]]]]:
    """A task asking ``approve`` (a worker runs it meanwhile) and the operator logged in:
    its id and ``answer(fields)``, which posts the answer form with the CSRF token."""
    submitted = await app.submit("ask", {"question": "ok?"}, Owner("alice"))
    worker = app.worker(concurrency=1)
    running = asyncio.create_task(worker.run())
    try:
        async for snapshot in app.watch(submitted.id, System()):
            if snapshot.status == "waiting_input":
                break
        page = await client.get("/login")
        await client.post("/login", data={"token": TOKEN, "csrf_token": csrf_of(page.text)})
        csrf = csrf_of((await client.get(f"/task?id={submitted.id}")).text)

        async def answer(fields: dict[str, str]) -> httpx.Response:
            return await client.post("/task/respond", data={
                "id": submitted.id, "csrf_token": csrf, **fields})

        yield submitted.id, answer
    finally:
        await worker.shutdown(drain_timeout=0)
        await running


async def test_an_answer_giving_a_key_twice_is_refused(
        client: httpx.AsyncClient, app: App) -> None:
    """The answer box reads JSON as the CLI does: an object that gives one key twice is a
    bad request naming the key — not its last value — and the task keeps waiting."""
    async with waiting_for_an_answer(client, app) as (task_id, answer):
        refused = await answer({"key": "approve", "answer": '{"ok": 1, "ok": 2}'})
        assert 400 == refused.status_code
        assert "the answer gives the key &#39;ok&#39; twice" in refused.text
        assert "waiting_input" == (await app.get(task_id, System())).status


async def test_an_answer_that_changes_nothing_is_refused_saying_so(
        client: httpx.AsyncClient, app: App) -> None:
    """A form without the answer field (not an empty answer), or an answer to a key the
    task never asked (or answered already), MUST be a bad request saying nothing changed —
    never a redirect as if it had been taken — and the task keeps waiting; the question's
    own key is taken."""
    async with waiting_for_an_answer(client, app) as (task_id, answer):
        missing = await answer({"key": "approve"})
        assert (400, True) == (missing.status_code, "the form holds no answer" in missing.text)
        unasked = await answer({"key": "nobody-asked", "answer": "true"})
        assert (400, True) == (unasked.status_code, "nothing changed" in unasked.text)
        assert "waiting_input" == (await app.get(task_id, System())).status
        assert 303 == (await answer({"key": "approve", "answer": "true"})).status_code


async def test_text_that_is_not_printable_is_shown_as_its_escape(
        client: httpx.AsyncClient, app: App) -> None:
    """A bidi override (or any character that is not printable) in stored text MUST be
    shown as its escape (``\\u202e``, as the CLI shows it) — in the input, the progress
    message and the live event stream — never raw; pretty-printed
    JSON keeps its line breaks."""
    submitted = await app.submit("ask", {"question": "abc\u202egnp.exe a\x7fb"},
                                 Owner("alice"))
    claims = await app.store.claim_next("worker-7", 30.0, queues=["web"])
    await app.store.report_progress(claims[0].lease, 40, "copying abc\u202egnp.exe")
    await app.cancel(submitted.id, System())
    page = await client.get(f"/task?id={submitted.id}", headers=BEARER)
    assert 200 == page.status_code
    assert "\u202e" not in page.text
    assert "\x7f" not in page.text
    assert "&#34;question&#34;: &#34;abc\\u202egnp.exe a\\x7fb&#34;" in page.text
    assert "copying abc\\u202egnp.exe" in page.text
    assert "{\n  &#34;question&#34;" in page.text  # the JSON's own line breaks are kept
    events = await client.get(f"/task/events?id={submitted.id}", headers=BEARER)
    data = [json.loads(line[len("data: "):]) for line in events.text.splitlines()
            if line.startswith("data: {\"")]
    assert "copying abc\\u202egnp.exe" == data[0]["message"]


async def test_credentials_that_are_not_ascii_are_refused_not_a_server_error(
        client: httpx.AsyncClient, app: App) -> None:
    """A session cookie or CSRF token holding a character beyond ASCII MUST be refused as
    a wrong one (401, 403) with the security headers, never a 500."""
    csrf = csrf_of((await client.get("/login")).text)
    await client.post("/login", data={"token": TOKEN, "csrf_token": csrf})
    name = auth_cookie(client)
    good = client.cookies[name]
    submitted = await app.submit("steps", {"count": 1}, Owner("alice"))
    bad_mac = await client.post("/task/cancel", data={"id": submitted.id,
                                                      "csrf_token": csrf[:-1] + "é"})
    assert 403 == bad_mac.status_code
    assert "DENY" == bad_mac.headers["x-frame-options"]
    client.cookies.clear()
    refused = await client.get(
        "/", headers={"cookie": f"{name}={good[:-1]}é".encode()})
    assert 401 == refused.status_code
    assert "DENY" == refused.headers["x-frame-options"]
    assert "pending" == (await app.get(submitted.id, System())).status


async def test_an_unexpected_failure_is_a_500_with_the_security_headers(app: App) -> None:
    """A failure the dashboard does not expect (here the store's counts raising
    ``RuntimeError``) MUST still answer 500 with the headers every response carries, and
    without the failure's text."""
    web = create_app(app, token=TOKEN)

    async def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the store broke")
    app.store.counts = broken  # type: ignore[method-assign]
    transport = httpx.ASGITransport(app=web, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash") as c:
        response = await c.get("/", headers=BEARER)
    assert 500 == response.status_code
    assert "the store broke" not in response.text
    assert "DENY" == response.headers["x-frame-options"]
    assert "no-store" == response.headers["cache-control"]


@pytest.mark.parametrize("typed", ["1e999", "-1e999", "9" * 3000, "[1, 1e400]", "NaN"])
async def test_an_answer_is_read_as_the_cli_reads_it(
        client: httpx.AsyncClient, app: App, typed: str) -> None:
    """The answer box MUST read an answer as ``tasks respond`` does (one function,
    :func:`tasks_core._json.parse_answer`): a number no payload can carry — overflowing to
    infinity, an integer of more than 8192 bits, even inside an array — and ``NaN`` are the
    text typed, not a 400 "NaN and infinities are not JSON"."""
    async with waiting_for_an_answer(client, app) as (task_id, answer):
        taken = await answer({"key": "approve", "answer": typed})
        assert 303 == taken.status_code, taken.text[-300:]
        done = await app.wait(task_id, System(), timeout=30)
    assert ("completed", typed) == (done.status, done.result)
