"""The dashboard in a real headless Chromium (Playwright): every page, a task followed
live from submitted to completed, an input answered through the form, a running task
cancelled, requests refused without the token or the CSRF token, and a page on another
port of the host refused when it makes the operator's browser post a form.

The dashboard, an App on a SQLite file and a worker run in one event loop on a thread of
the test process (uvicorn on a free port). Chromium is Debian's (``CHROMIUM`` or
/usr/bin/chromium): missing, these tests skip — and fail under CI (``CI`` set).
"""

from __future__ import annotations

import asyncio
import html
import http.server
import os
import re
import shutil
import socket
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TOKEN, build_app
from tasks_core import App, Owner, StoreUnavailable, SubmitItem, System, Worker
from tasks_dashboard import create_app

pytestmark = pytest.mark.browser

SHOTS = os.environ.get("TASKS_DASHBOARD_SCREENSHOTS")  # a folder: save the main pages


def chromium() -> str:
    """Debian's Chromium; missing: skip here, fail under CI."""
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(path):
        message = "no Chromium (apt-get install -y chromium, or set CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}: CI must run the browser tests")
        pytest.skip(message)
    return path


class Served:
    """The dashboard, its App and a worker, served on a thread's event loop."""

    def __init__(self, db: Path) -> None:
        import uvicorn

        self.app: App = build_app(f"sqlite:///{db}")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(self.app, token=TOKEN), host="127.0.0.1",
                                port=self.port, log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_until_complete,
                                       args=(self._main(),), daemon=True)

    async def _main(self) -> None:
        async with self.app:
            worker = Worker(self.app, concurrency=4, lease_for=5.0, input_park=30.0,
                            poll_interval=0.2, progress_interval=0.1, reap_interval=None)
            async with worker:
                await self.server.serve()

    def call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coroutine`` on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    def submit(self, task: str, data: dict[str, Any] | None) -> str:
        return str(self.call(self.app.submit(task, data, Owner("alice"))).id)

    def __enter__(self) -> Served:
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                return self
            self.thread.join(0.05)
        raise RuntimeError("the dashboard did not start")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(20)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with Served(tmp_path_factory.mktemp("dashboard") / "tasks.db") as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path,
                                              args=["--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Any]:
    """A logged-in page; console errors (a CSP violation among them) fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(served.url + "/login")
    page.fill("input[name=token]", TOKEN)
    page.click("text=Log in")
    page.wait_for_url(served.url + "/")
    yield page
    context.close()
    assert [] == errors


def status_is(page: Any, status: str) -> None:
    """Wait until the page shows ``status`` (no script evaluated: the CSP forbids eval)."""
    from playwright.sync_api import expect

    expect(page.locator("#status")).to_have_text(status, timeout=15000)


def progress_at_least(page: Any, value: float) -> None:
    """Wait until the progress bar, updated live, reaches ``value``."""
    for _ in range(300):
        if float(page.locator("#progress").get_attribute("value") or 0) >= value:
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"the progress bar did not reach {value}")


def shot(page: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"dashboard-{name}.png"), full_page=True)


def test_every_page_opens(page: Any, served: Served) -> None:
    for count in (2, 3):
        served.submit("steps", {"count": count, "pause": 0.05})
    waiting = served.submit("ask", {"question": "Ship release 1.4?"})
    busy = served.submit("steps", {"count": 100, "pause": 0.2})
    page.goto(f"{served.url}/task?id={busy}")
    progress_at_least(page, 1)
    page.goto(served.url + "/")
    assert "Queues" == page.inner_text("h1")
    assert page.locator("text=web").count() >= 1
    shot(page, "queues")
    page.click("nav >> text=Tasks")
    assert page.locator("#tasks tbody tr").count() >= 4
    shot(page, "tasks")
    page.click("nav >> text=Workers")
    page.wait_for_selector("text=steps")
    shot(page, "workers")
    page.goto(f"{served.url}/task?id={waiting}")
    page.wait_for_selector("text=Input requested")
    shot(page, "input")
    page.goto(f"{served.url}/task?id={busy}")
    progress_at_least(page, 6)
    shot(page, "task")
    served.call(served.app.cancel(busy, System()))


def test_a_task_is_followed_live_until_it_completes(page: Any, served: Served) -> None:
    task_id = served.submit("steps", {"count": 6, "pause": 0.4})
    page.goto(f"{served.url}/task?id={task_id}")
    # The bar moves without a reload, then the page redraws itself as completed.
    progress_at_least(page, 30)
    assert "running" == page.inner_text("#status")
    status_is(page, "completed")
    assert '"steps": 6' in page.inner_text("#result")
    assert "completed" in page.inner_text("ol.timeline")


def test_an_input_request_is_answered_through_the_form(page: Any, served: Served) -> None:
    task_id = served.submit("ask", {"question": "<b>Pay</b> 40 EUR?"})
    page.goto(f"{served.url}/task?id={task_id}")
    page.wait_for_selector("text=Input requested", timeout=15000)
    assert "<b>Pay</b> 40 EUR?" in page.inner_text(".input-request pre")  # as text
    page.fill("textarea[name=answer]", '{"ok": true}')
    page.click("text=Send answer")
    status_is(page, "completed")
    assert '"ok": true' in page.inner_text("#result")


def test_a_running_task_is_cancelled(page: Any, served: Served) -> None:
    task_id = served.submit("forever", None)
    page.goto(f"{served.url}/task?id={task_id}")
    status_is(page, "running")
    page.click("text=Cancel task")
    status_is(page, "cancelled")
    assert "cancelled" == served.call(served.app.get(task_id, System())).status


def test_requests_without_the_token_or_csrf_token_are_refused(
        browser: Any, page: Any, served: Served) -> None:
    task_id = served.submit("forever", None)
    stranger = browser.new_context()
    response = stranger.new_page().goto(served.url + "/tasks")
    assert response is not None
    assert 401 == response.status
    stranger.close()
    # Logged in, a POST without the form's CSRF token is refused and changes nothing.
    refused = page.request.post(served.url + "/task/cancel", form={"id": task_id})
    assert 403 == refused.status
    assert "cancelled" != served.call(served.app.get(task_id, System())).status
    served.call(served.app.cancel(task_id, System()))


def _set_visibility(page: Any, state: str) -> None:
    """Make the page's document ``state`` ("hidden" or "visible") and tell its scripts, as
    a tab put in the background (or brought back) does."""
    page.evaluate("""(state) => {
        Object.defineProperty(document, "visibilityState", {value: state, configurable: true});
        Object.defineProperty(document, "hidden", {value: state === "hidden",
                                                   configurable: true});
        document.dispatchEvent(new Event("visibilitychange"));
    }""", state)


def test_a_hidden_task_page_closes_its_live_stream(page: Any, served: Served) -> None:
    """A task page in a hidden tab MUST close its event stream (a browser allows six
    connections per host: six open task pages locked it out) and reconnect when shown
    again, catching up with the progress made meanwhile."""
    task_id = served.submit("forever", None)

    def events(request: Any) -> bool:
        return "/task/events?" in request.url

    page.goto(f"{served.url}/task?id={task_id}")
    status_is(page, "running")  # no reload ahead: the status stays
    progress_at_least(page, 50)
    with page.expect_event("requestfailed", events, timeout=10000):
        _set_visibility(page, "hidden")
    page.locator("#progress").evaluate("bar => { bar.value = 0; }")
    with page.expect_request(events, timeout=10000):
        _set_visibility(page, "visible")
    progress_at_least(page, 50)
    served.call(served.app.cancel(task_id, System()))


def test_a_long_id_does_not_widen_the_pages(page: Any, served: Served) -> None:
    """A 200-character id (no space to break at) MUST wrap, not make the page wider than
    the window."""
    long_key = "k" * 200
    task_id = str(served.call(served.app.submit("steps", {"count": 1, "pause": 0.05},
                                                Owner("alice"), key=long_key)).id)
    # Ended first: a task page reloads itself when the status changes, which would abort
    # the navigation to the next page.
    served.call(served.app.wait(task_id, Owner("alice"), timeout=30))
    for path in (f"/task?id={task_id}", "/tasks?view=keyed", f"/tasks?key={long_key}"):
        page.goto(served.url + path)
        assert long_key in page.inner_text("main"), path
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 1280, (path, width)


ONE_LINE = """cell => { const text = document.createRange(); text.selectNodeContents(cell);
    const line = parseFloat(getComputedStyle(cell).lineHeight);
    return text.getBoundingClientRect().height < 1.5 * line; }"""  # its text on one line
NO_SIDEWAYS = "document.documentElement.scrollWidth <= window.innerWidth"


@pytest.mark.parametrize("width", [375, 1280])
def test_short_cells_stay_whole_beside_long_text(page: Any, served: Served, width: int) -> None:
    """Beside a 200-character id and a 2 KB error message, a status, a count, an age and a
    snapshot label MUST each stay on one line (only ids, names and messages break
    anywhere), and no page may scroll sideways — on a phone (375 px) as on a desktop."""
    long_key, message = f"{width}" + "w" * 196, "e" * 2000
    task_id = str(served.call(served.app.submit("fail", {"message": message}, Owner("alice"),
                                                key=long_key)).id)
    served.call(served.app.submit_many([SubmitItem(task="steps", input={"count": 1},
                                                   delay=86400)] * 1000, System()))
    served.call(served.app.wait(task_id, Owner("alice"), timeout=30))
    page.set_viewport_size({"width": width, "height": 800})
    page.goto(served.url + "/")
    scheduled = page.locator("tbody tr", has_text="web").locator("td.num").nth(1)
    assert int(scheduled.inner_text()) >= 1000
    assert scheduled.evaluate(ONE_LINE)
    assert page.evaluate(NO_SIDEWAYS)
    page.goto(served.url + "/tasks?view=keyed")
    row = page.locator("#tasks tr", has_text=long_key)
    assert row.locator(".status").evaluate(ONE_LINE)
    assert row.locator("td.age").evaluate(ONE_LINE)
    assert page.evaluate(NO_SIDEWAYS)
    page.goto(f"{served.url}/task?id={task_id}")
    assert message in page.inner_text("table.kv")
    assert page.locator("table.kv th >> text=queue").evaluate(ONE_LINE)
    assert page.locator("#status").evaluate(ONE_LINE)
    assert page.evaluate(NO_SIDEWAYS)
    page.goto(served.url + "/workers")
    assert page.evaluate(NO_SIDEWAYS)


def test_the_answer_form_fits_a_phone(page: Any, served: Served) -> None:
    """At 375 px the task page of a task waiting for input MUST NOT scroll sideways: the
    answer box fits inside its input-request box."""
    task_id = served.submit("ask", {"question": "Ship it?"})
    page.set_viewport_size({"width": 375, "height": 800})
    page.goto(f"{served.url}/task?id={task_id}")
    page.wait_for_selector("text=Input requested", timeout=15000)
    box, answer = (page.locator(s).bounding_box() for s in (".input-request", "textarea"))
    assert answer["x"] + answer["width"] <= box["x"] + box["width"]
    assert page.evaluate(NO_SIDEWAYS)
    served.call(served.app.cancel(task_id, System()))


class AnotherPort:
    """A page served on another port of the dashboard's host (the same site: cookies
    ignore ports), as an outside tester wrote it: it fetches the dashboard's login form (a
    CSRF cookie and its matching token, anyone's to get), sets that cookie in the visiting
    browser over the operator's own, and submits a form that cancels ``task_id``."""

    def __init__(self, dashboard: str, task_id: str) -> None:
        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                form = httpx.get(dashboard + "/login")
                name, value = form.headers["set-cookie"].split(";")[0].split("=", 1)
                found = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
                assert found is not None
                body = (f'<form id=f method=post action="{dashboard}/task/cancel">'
                        f'<input name=csrf_token value="{found.group(1)}">'
                        f'<input name=id value="{html.escape(task_id)}"></form>'
                        "<script>document.getElementById('f').submit()</script>").encode()
                self.send_response(200)
                self.send_header("set-cookie", f"{name}={value}; Path=/; SameSite=Strict")
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                del args

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Page)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> AnotherPort:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.thread.join(10)
        self.server.server_close()


def test_a_page_on_another_port_cannot_act_for_the_operator(page: Any, served: Served) -> None:
    """A page on another port of the host can overwrite the dashboard's CSRF cookie with
    one whose token it knows (cookies ignore ports) and submit the cancel form in the
    operator's logged-in browser: the browser marks that POST as from another origin, and
    the dashboard MUST refuse it (403) — the task keeps running."""
    task_id = served.submit("forever", None)
    page.goto(f"{served.url}/task?id={task_id}")
    status_is(page, "running")
    other = page.context.new_page()
    with AnotherPort(served.url, task_id) as attacker, other.expect_response(
            lambda r: "/task/cancel" in r.url, timeout=15000) as posted:
        other.goto(attacker.url)
    assert 403 == posted.value.status
    assert "another origin" in posted.value.text()
    assert "running" == served.call(served.app.get(task_id, System())).status
    other.close()
    served.call(served.app.cancel(task_id, System()))


def test_a_task_page_says_when_its_live_stream_lost_the_store(
        page: Any, served: Served) -> None:
    """The store lost mid-stream ends the event stream with an ``end`` event saying why:
    the page MUST stop listening and show it in place of the progress, not hang on a cut
    stream (reconnecting forever)."""
    task_id = served.submit("forever", None)
    page.goto(f"{served.url}/task?id={task_id}")
    status_is(page, "running")
    store = served.app.store
    get = store.get

    async def lost(wanted: str, *args: Any, **kwargs: Any) -> Any:
        if wanted == task_id:
            raise StoreUnavailable("connection to the database lost")
        return await get(wanted, *args, **kwargs)

    store.get = lost  # type: ignore[method-assign]
    try:
        from playwright.sync_api import expect

        expect(page.locator("#progress-text")).to_have_text(
            "Live updates stopped: StoreUnavailable: connection to the database lost "
            "(reload the page)", timeout=15000)
    finally:
        store.get = get  # type: ignore[method-assign]
    served.call(served.app.cancel(task_id, System()))
