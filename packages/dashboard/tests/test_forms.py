"""What a POST must be before its form is read: from the dashboard's own origin (a
browser says where a request comes from), within a body cap, a form of text fields only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from conftest import BEARER, TOKEN, build_app
from tasks_core import App, Limits, Owner, System
from tasks_dashboard import create_app
from tasks_dashboard._forms import SMALL_FORM_BYTES, answer_form_bytes
from test_security import csrf_of, waiting_for_an_answer

pytestmark = pytest.mark.anyio

ANOTHER_PORT = "http://dash:9999"
"""A page on another port of the dashboard's host: the same site (cookies ignore ports),
another origin."""


async def _logged_in(client: httpx.AsyncClient) -> str:
    """Log ``client`` in; the CSRF token of its pages."""
    csrf = csrf_of((await client.get("/login")).text)
    assert 303 == (await client.post("/login", data={"token": TOKEN,
                                                      "csrf_token": csrf})).status_code
    return csrf


@pytest.mark.parametrize("marks", [
    {"origin": ANOTHER_PORT},
    {"origin": "null"},
    {"origin": "https://dash"},  # another scheme
    {"sec-fetch-site": "same-site"},  # another port: same site, not same origin
    {"sec-fetch-site": "cross-site"},
    {"sec-fetch-site": "same-site", "origin": "http://dash"},
])
async def test_a_post_a_browser_marks_as_from_another_origin_is_refused(
        client: httpx.AsyncClient, app: App, marks: dict[str, str]) -> None:
    """A POST whose ``Origin`` is not the dashboard's own (scheme, host and port) or whose
    ``Sec-Fetch-Site`` is neither ``same-origin`` nor ``none`` MUST be refused with 403,
    with the right session and CSRF token: a page on another port of the host can set the
    CSRF cookie (cookies ignore ports) and knows a matching token. Nothing is written."""
    submitted = await app.submit("steps", {"count": 1}, Owner("alice"))
    csrf = await _logged_in(client)
    for action, fields in (("/task/cancel", {"id": submitted.id}),
                           ("/task/respond", {"id": submitted.id, "key": "k", "answer": "1"}),
                           ("/logout", {}), ("/login", {"token": TOKEN})):
        refused = await client.post(action, data={**fields, "csrf_token": csrf}, headers=marks)
        assert 403 == refused.status_code, action
        assert "origin" in refused.text, action
    assert "pending" == (await app.get(submitted.id, System())).status
    assert 200 == (await client.get("/")).status_code  # the logout was refused too


async def test_a_post_from_the_dashboards_own_origin_is_taken(
        client: httpx.AsyncClient, app: App) -> None:
    """A browser's POST from the dashboard's own page (``Origin`` its own,
    ``Sec-Fetch-Site: same-origin``) is taken; so is any POST with the operator token as
    ``Authorization: Bearer`` (a browser never sends it on its own), whatever its origin."""
    first = await app.submit("steps", {"count": 1}, Owner("alice"))
    second = await app.submit("steps", {"count": 1}, Owner("alice"))
    csrf = await _logged_in(client)
    own = {"origin": "http://dash", "sec-fetch-site": "same-origin"}
    taken = await client.post("/task/cancel", data={"id": first.id, "csrf_token": csrf},
                              headers=own)
    assert 303 == taken.status_code
    async with httpx.AsyncClient(transport=client._transport, base_url="http://dash") as c:
        script = await c.post("/task/cancel", data={"id": second.id},
                              headers={**BEARER, "origin": ANOTHER_PORT,
                                       "sec-fetch-site": "cross-site"})
    assert 303 == script.status_code
    assert {"cancelled"} == {(await app.get(t.id, System())).status for t in (first, second)}


async def test_a_login_body_past_its_cap_is_refused_unread(client: httpx.AsyncClient) -> None:
    """Before any login, a POST body is capped (:data:`SMALL_FORM_BYTES`, the login form
    needs far less): a larger ``Content-Length`` is refused with 413 unread, and a body
    streamed without one is read no further than the cap."""
    csrf = csrf_of((await client.get("/login")).text)
    declared = await client.post("/login", content=b"x" * (SMALL_FORM_BYTES + 1), headers={
        "content-type": "application/x-www-form-urlencoded"})
    assert 413 == declared.status_code
    sent: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        for _ in range(1000):  # 64 MiB if read whole
            sent.append(1)
            yield b"token=" + b"a" * (64 * 1024)

    streamed = await client.post("/login", content=endless(), headers={
        "content-type": "application/x-www-form-urlencoded"})
    assert 413 == streamed.status_code
    assert len(sent) <= 2 + SMALL_FORM_BYTES // (64 * 1024)
    ok = await client.post("/login", data={"token": TOKEN, "csrf_token": csrf})
    assert 303 == ok.status_code


async def test_a_form_with_a_file_part_is_refused(
        client: httpx.AsyncClient, app: App) -> None:
    """A form value MUST be text: a file part (multipart) is refused with 400 — before a
    login too, never spooled — and never stored as the repr of an upload."""
    csrf = csrf_of((await client.get("/login")).text)
    login = await client.post("/login", data={"csrf_token": csrf},
                              files={"token": ("t.txt", TOKEN.encode())})
    assert 400 == login.status_code
    async with waiting_for_an_answer(client, app) as (task_id, _):
        client.cookies.clear()  # a script: the Bearer header only
        upload = await client.post("/task/respond", data={"id": task_id, "key": "approve"},
                                   files={"answer": ("a.txt", b"hello")}, headers=BEARER)
        assert 400 == upload.status_code
        assert "a file part: the fields must be text" in upload.text
        assert "waiting_input" == (await app.get(task_id, System())).status
        text = await client.post("/task/respond", headers=BEARER, data={
            "id": task_id, "key": "approve"}, files={"answer": (None, b"hello")})
        assert 303 == text.status_code  # a multipart text field is text
        done = await app.wait(task_id, System(), timeout=30)
    assert "hello" == done.result


async def test_a_form_that_is_not_a_form_is_refused(client: httpx.AsyncClient) -> None:
    """A POST body that is not a form (JSON, text) is refused with 415, not read as an
    empty form."""
    for kind in ("application/json", "text/plain", ""):
        refused = await client.post("/task/cancel", content=b'{"id": "x"}', headers={
            **BEARER, "content-type": kind})
        assert 415 == refused.status_code, kind


async def test_the_answer_form_takes_the_largest_answer_a_task_takes() -> None:
    """The answer form's cap is derived from the App's ``Limits.max_input_bytes`` (every
    byte of the answer percent-encoded, the key and id beside it): the largest answer the
    App takes passes the cap, a body larger than the cap is refused with 413 unread."""
    limited = build_app("memory://", limits=Limits(max_input_bytes=4096))
    web = create_app(limited, token=TOKEN)
    async with limited, httpx.AsyncClient(transport=httpx.ASGITransport(app=web),
                                          base_url="http://dash") as client:
        async with waiting_for_an_answer(client, limited) as (task_id, answer):
            largest = "é" * ((4096 - len('{"approve":""}')) // 2)  # 2 bytes each, 6 sent
            assert 303 == (await answer({"key": "approve", "answer": largest})).status_code
            done = await limited.wait(task_id, System(), timeout=30)
        assert largest == done.result
        assert answer_form_bytes(limited.limits) >= 3 * 4096
        client.cookies.clear()
        too_big = await client.post("/task/respond", headers=BEARER, data={
            "id": task_id, "key": "approve",
            "answer": "x" * (answer_form_bytes(limited.limits) + 1)})
        assert 413 == too_big.status_code
