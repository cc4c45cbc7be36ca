"""What the pages show: counts by queue, tasks newest first with filters and paging, a
task with its history and event stream, workers by their leases; the CLI command."""

from __future__ import annotations

import json
import logging
import re
import socket
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import BEARER, TOKEN, build_app
from tasks_core import App, Owner, SubmitItem, System, TaskContext, TaskStatus
from tasks_core.cli.main import run
from tasks_core.errors import (
    CapabilityNotSupported,
    InvalidInput,
    StoreError,
    StoreUnavailable,
)
from tasks_core.periodic import TICK_PREFIX
from tasks_core.random_ids import random_id_floor
from tasks_core.runtime._scheduler import Scheduler
from tasks_dashboard import _reads, create_app

pytestmark = pytest.mark.anyio


def ids_on(html: str) -> list[str]:
    return [i.replace("%3A", ":") for i in re.findall(r'href="/task\?id=([^"]+)"', html)]


async def test_tasks_are_listed_newest_first_and_paged(
        client: httpx.AsyncClient, app: App) -> None:
    """120 random-id tasks: three pages of at most 50, newest first, each task once."""
    submitted = [s.id for s in await app.submit_many(
        [SubmitItem(task="steps", input={"count": 1}) for _ in range(120)], Owner("bob"))]
    seen: list[str] = []
    url = "/tasks"
    for _ in range(5):
        page = await client.get(url, headers=BEARER)
        assert 200 == page.status_code
        seen += ids_on(page.text)
        found = re.search(r'rel="next" href="([^"]+)"', page.text)
        if found is None:
            break
        url = found.group(1).replace("&amp;", "&")
    assert sorted(submitted, reverse=True) == seen


async def walk(client: httpx.AsyncClient, url: str) -> list[list[str]]:
    """The ids of every page from ``url`` on, following "Older →"."""
    pages: list[list[str]] = []
    for _ in range(20):
        page = await client.get(url, headers=BEARER)
        assert 200 == page.status_code, url
        pages.append(ids_on(page.text))
        found = re.search(r'rel="next" href="([^"]+)"', page.text)
        if found is None:
            return pages
        url = found.group(1).replace("&amp;", "&")
    raise AssertionError("more than 20 pages")


async def test_keyed_tasks_are_shown_when_newest_first_has_none(
        client: httpx.AsyncClient, app: App) -> None:
    """After ``tasks demo`` every task is keyed: the tasks page and the queues page's count
    links MUST list them (the keyed view, saying so) rather than "No tasks match."."""
    keyed = [(await app.submit("steps", {"count": 1}, Owner("bob"), key=f"demo-{n}")).id
             for n in range(3)]
    for url in ("/tasks", "/tasks?queue=web&status=pending"):
        page = await client.get(url, headers=BEARER)
        assert sorted(keyed) == ids_on(page.text), url
        assert "No task submitted without a key matches" in page.text
        assert "No tasks match." not in page.text


async def test_newest_first_continues_into_the_keyed_tasks(
        client: httpx.AsyncClient, app: App) -> None:
    """The last page of newest first MUST lead on to the keyed tasks: following "Older →"
    from the first page reaches every task once, random ids newest first, then keyed ones
    in id order."""
    made = [s.id for s in await app.submit_many(
        [SubmitItem(task="steps", input={"count": 1}) for _ in range(60)], Owner("bob"))]
    keyed = [(await app.submit("steps", {"count": 1}, Owner("bob"), key=f"k-{n}")).id
             for n in range(3)]
    pages = await walk(client, "/tasks")
    assert [*sorted(made, reverse=True), *sorted(keyed)] == [i for p in pages for i in p]


@pytest.mark.parametrize("count", [100, 250])
async def test_a_listing_of_whole_pages_ends_without_an_empty_page(
        client: httpx.AsyncClient, app: App, count: int) -> None:
    """Pending tasks filling whole pages (a multiple of 50, with keyed pending tasks
    counted beside them) MUST end on their last full page — or go on to the keyed tasks —
    never on an "Older →" to an empty page."""
    made = [s.id for s in await app.submit_many(
        [SubmitItem(task="steps", input={"count": 1}) for _ in range(count)], Owner("bob"))]
    keyed = (await app.submit("steps", {"count": 1}, Owner("bob"), key="k-1")).id
    pages = await walk(client, "/tasks?status=pending")
    assert all(pages), [len(p) for p in pages]
    assert [*sorted(made, reverse=True), keyed] == [i for p in pages for i in p]


@pytest.mark.parametrize("count", [50, 100])
async def test_keyed_tasks_filling_whole_pages_end_without_an_empty_page(
        client: httpx.AsyncClient, app: App, count: int) -> None:
    """Keyed tasks filling whole pages MUST end on their last full page: no "Older →" to
    an empty one."""
    keyed = [s.id for s in await app.submit_many(
        [SubmitItem(task="steps", input={"count": 1}, key=f"f{n:03}") for n in range(count)],
        Owner("carol"))]
    pages = await walk(client, "/tasks?view=keyed&owner=carol")
    assert all(pages), [len(p) for p in pages]
    assert sorted(keyed) == [i for p in pages for i in p]


async def test_newest_first_link_drops_the_key_filter(
        client: httpx.AsyncClient, app: App) -> None:
    """A key filter lists keyed tasks: "Newest first" MUST lead to the newest tasks under
    the other filters, not back to the same keyed listing."""
    await app.submit("steps", {"count": 1}, Owner("bob"), key="report-7")
    page = await client.get("/tasks?key=report-7&queue=web", headers=BEARER)
    found = re.search(r'<a href="([^"]+)"[^>]*>Newest first</a>', page.text)
    assert found is not None
    assert "/tasks?queue=web" == found.group(1)


async def test_newest_finds_old_tasks_past_an_empty_window(app: App) -> None:
    """Tasks submitted long ago (ids stamped a day back) are found by widening."""
    old = random_id_floor(int((datetime.now(UTC) - timedelta(days=3)).timestamp() * 1000))
    listing = await _reads.newest(app, System(), limit=10)
    assert [] == listing.items
    assert listing.next is None
    await app.submit("steps", {"count": 1}, Owner("bob"))
    listing = await _reads.newest(app, System(), before=old, limit=10)
    assert [] == listing.items


async def test_filters_by_status_queue_owner_tenant_and_key(
        client: httpx.AsyncClient, app: App) -> None:
    alice = await app.submit("steps", {"count": 1}, Owner("alice"))
    bob = await app.submit("steps", {"count": 1}, Owner("bob"), key="report-7")
    acme = await app.submit("steps", {"count": 1}, Owner("carol", "acme"))
    await app.cancel(alice.id, System())
    async def shown(query: str) -> list[str]:
        page = await client.get(f"/tasks?{query}", headers=BEARER)
        assert 200 == page.status_code, query
        return ids_on(page.text)
    assert [alice.id] == await shown("status=cancelled")
    assert [acme.id] == await shown("tenant=acme")
    assert [alice.id] == await shown("owner=alice")
    assert [bob.id] == await shown("key=report-7")
    assert [bob.id] == await shown("view=keyed&owner=bob")
    assert [] == await shown("queue=default")
    assert {alice.id, acme.id} == set(await shown("queue=web"))
    assert 400 == (await client.get("/tasks?status=bogus", headers=BEARER)).status_code


async def test_periodic_ticks_are_listed_with_the_keyed_tasks_not_the_random_ones(
        client: httpx.AsyncClient) -> None:
    """A periodic tick's id begins with ``"::"`` as a random id does but carries no submit
    time: it MUST be listed under "Keyed tasks" (in id order), never among
    the newest random-id tasks."""
    app = build_app("memory://")

    @app.periodic(every=60.0)
    @app.task(queue="web")
    async def hourly(ctx: TaskContext) -> None:
        return None

    async with app:
        made = await app.submit("steps", {"count": 1}, Owner("bob"))
        keyed = await app.submit("steps", {"count": 1}, Owner("bob"), key="a-0")
        await Scheduler(app._store, app.tasks, app.schedules,  # type: ignore[arg-type]
                        notify=app.notices.work.notify).run_once()
        ticks = [s.id for s in await app.list(System(), limit=100)
                 if s.id.startswith(TICK_PREFIX)]
        assert len(ticks) == 1
        transport = httpx.ASGITransport(app=create_app(app, token=TOKEN))
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as web:
            keyed_page = await web.get("/tasks?view=keyed", headers=BEARER)
            newest_page = await web.get("/tasks", headers=BEARER)
    assert sorted([keyed.id, *ticks]) == ids_on(keyed_page.text)  # id order
    assert [made.id] == ids_on(newest_page.text)


async def test_one_task_read_is_said_in_the_singular(
        client: httpx.AsyncClient, app: App) -> None:
    """The listing's footer MUST say "1 task read", not "1 tasks read"."""
    await app.submit("steps", {"count": 1}, Owner("bob"))
    page = await client.get("/tasks", headers=BEARER)
    assert "1 task read for this page" in page.text


@pytest.mark.parametrize("after", ["%00", "a%00b", "%1b[31m", "x" * 1025])
async def test_a_cursor_no_task_id_could_be_is_a_bad_request(
        client: httpx.AsyncClient, app: App, after: str) -> None:
    """A keyed listing's ``after`` that no task id could be (NUL, a control character,
    over 1024 bytes) MUST be refused with 400 on every store, before the store is asked:
    PostgreSQL refuses a NUL in text with an error of its own."""
    await app.submit("steps", {"count": 1}, Owner("bob"), key="report-7")
    page = await client.get(f"/tasks?view=keyed&after={after}", headers=BEARER)
    assert 400 == page.status_code


async def test_queues_page_counts_by_status(client: httpx.AsyncClient, app: App) -> None:
    for _ in range(3):
        await app.submit("steps", {"count": 1}, Owner("bob"))
    later = await app.submit("steps", {"count": 1}, Owner("bob"), delay=3600)
    done = await app.submit("steps", {"count": 1}, Owner("bob"))
    await app.cancel(done.id, System())
    page = await client.get("/", headers=BEARER)
    assert 200 == page.status_code
    assert "scheduled" == (await app.get(later.id, System())).status
    assert 'status=pending">3<' in page.text
    assert 'status=scheduled">1<' in page.text
    assert 'status=cancelled">1<' in page.text
    row = re.search(r"<td><a href=\"/tasks\?queue=web\">web</a></td>(.*?)</tr>", page.text,
                    re.S)
    assert row is not None
    assert "s ago" not in row.group(1)


async def test_task_page_shows_history_and_input_request(
        client: httpx.AsyncClient, app: App) -> None:
    submitted = await app.submit("steps", {"count": 2}, Owner("alice"))
    await app.cancel(submitted.id, System())
    page = await client.get(f"/task?id={submitted.id}", headers=BEARER)
    assert 200 == page.status_code
    assert "cancelled" in page.text
    assert "Cancel task" not in page.text
    assert "<strong>cancelled</strong>" in page.text  # the history's event
    events = await client.get(f"/task/events?id={submitted.id}", headers=BEARER)
    assert events.headers["content-type"].startswith("text/event-stream")
    assert '"status": "cancelled"' in events.text
    assert "event: end" in events.text
    missing = await client.get("/task?id=nope", headers=BEARER)
    assert 404 == missing.status_code


async def test_workers_are_seen_through_their_leases(
        client: httpx.AsyncClient, app: App) -> None:
    submitted = await app.submit("forever", None, Owner("alice"))
    claims = await app.store.claim_next("worker-7", 30.0, queues=["web"])
    assert [submitted.id] == [c.snapshot.id for c in claims]
    assert TaskStatus.RUNNING == (await app.get(submitted.id, System())).status
    page = await client.get("/workers", headers=BEARER)
    assert "worker-7" in page.text
    assert "forever" in page.text


async def test_cli_refuses_without_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TASKS_DASHBOARD_TOKEN", raising=False)
    with pytest.raises(InvalidInput, match="TASKS_DASHBOARD_TOKEN"):
        await run(["dashboard", "--store", "memory://"])
    with pytest.raises(InvalidInput, match="at least 8"):
        await run(["dashboard", "--store", "memory://", "--token", "short"])


async def test_cli_never_writes_the_schema_into_an_existing_file(tmp_path: Path) -> None:
    """``tasks dashboard`` on a SQLite file without the tasks schema (here another program's
    database) MUST refuse, saying how to make one, and leave the file as it was: the
    dashboard shows and acts on tasks that exist, it creates no store."""
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as foreign:
        foreign.execute("CREATE TABLE notes (body TEXT)")
    with pytest.raises(StoreError, match="no tasks schema"):
        await run(["dashboard", "--store", f"sqlite:///{path}", "--token", TOKEN,
                   "--port", "1"])
    with sqlite3.connect(path) as opened:
        assert [("notes",)] == opened.execute("SELECT name FROM sqlite_master").fetchall()


@pytest.mark.parametrize("host", ["127.0.0.1", "no-such-host.invalid"])
async def test_cli_refuses_an_address_it_cannot_listen_on(host: str) -> None:
    """A port already taken, or a host that does not resolve, MUST be the command's own
    one-line refusal (``InvalidInput``: exit 2), not the web server's log and exit 3."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(InvalidInput, match=f"cannot listen on {host}:{port}"):
            await run(["dashboard", "--store", "memory://", "--token", TOKEN,
                       "--host", host, "--port", str(port)])


async def test_cli_says_to_install_the_dashboard_when_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins
    real = builtins.__import__

    def without_dashboard(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("tasks_dashboard"):
            raise ImportError(name)
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", without_dashboard)
    monkeypatch.delitem(__import__("sys").modules, "tasks_dashboard")
    with pytest.raises(CapabilityNotSupported, match="pip install tasks-dashboard"):
        await run(["dashboard", "--store", "memory://", "--token", TOKEN])


async def test_a_lease_is_shown_as_live_only_while_the_task_holds_it(
        client: httpx.AsyncClient, app: App) -> None:
    """A running task shows its lease and when it expires; a finished one the claim it
    kept MUST be labelled as ended, without an expiry that no longer means anything."""
    submitted = await app.submit("forever", None, Owner("alice"))
    await app.store.claim_next("worker-7", 30.0, queues=["web"])
    running = (await client.get(f"/task?id={submitted.id}", headers=BEARER)).text
    assert re.search(r"<th>lease</th><td>worker-7, expires \d{4}-", running)
    await app.cancel(submitted.id, System())
    assert (await app.get(submitted.id, System())).claim is not None  # kept by the store
    ended = (await client.get(f"/task?id={submitted.id}", headers=BEARER)).text
    assert "<th>last lease (ended)</th><td>worker-7</td>" in ended
    assert "expires" not in ended


async def test_an_error_page_shortens_a_long_value_with_spaces(
        client: httpx.AsyncClient) -> None:
    """A long value with spaces in it (``"ab "`` 300 times) MUST be cut too: the page
    shows at most the first :data:`SHOWN_RUN` characters of any value."""
    for path in ("/task?id=" + "ab%20" * 300, "/tasks?status=" + "ab%20" * 300):
        page = await client.get(path, headers=BEARER)
        assert page.status_code in (400, 404), path
        assert "ab " * 30 in page.text
        assert "ab " * 40 not in page.text


@pytest.mark.parametrize("path", ["/task?id=" + "x" * 1000, "/tasks?status=" + "x" * 2000])
async def test_an_error_page_shortens_a_long_value(client: httpx.AsyncClient,
                                                   path: str) -> None:
    """An error naming a long value (a 2,000-character status) MUST show its first 100
    characters and "…", not the whole value."""
    page = await client.get(path, headers=BEARER)
    assert page.status_code in (400, 404)
    assert "&#39;" + "x" * 99 + "…" in page.text  # 100 characters of the quoted value
    assert "x" * 100 not in page.text


async def test_an_error_page_of_a_store_outage_retries_itself(
        client: httpx.AsyncClient, app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GET answered 503 because the store is unavailable MUST reload itself every 10 s
    (saying so), as the Queues and Workers pages do, so an open tab recovers once the
    database is back; a 503 to a POST and the pages of other errors (404) MUST NOT."""
    submitted = await app.submit("forever", None, Owner("alice"))
    missing = await client.get("/task?id=nope", headers=BEARER)
    assert 404 == missing.status_code
    assert "refresh" not in missing.text

    async def lost(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("connection to the database lost")

    for read in ("get", "counts"):
        monkeypatch.setattr(app.store, read, lost)
    for path in ("/", f"/task?id={submitted.id}"):
        page = await client.get(path, headers=BEARER)
        assert 503 == page.status_code, path
        assert '<meta http-equiv="refresh" content="10">' in page.text, path
        assert "this page retries every 10 s" in page.text, path
    posted = await client.post("/task/cancel", data={"id": submitted.id}, headers=BEARER)
    assert 503 == posted.status_code
    assert "refresh" not in posted.text


async def test_a_live_stream_ends_with_an_event_when_the_store_is_lost(
        caplog: pytest.LogCaptureFixture) -> None:
    """The store failing mid-stream (a PostgreSQL database dropped: ``StoreUnavailable``
    from a read of ``watch``) MUST end the event stream with ``event: end`` whose data
    says why — the page stops listening and shows it — logged as one WARNING line without
    a traceback; it was cut with no event and "response already started" logged."""
    app = build_app("memory://")
    app.poll_interval = 0.05
    async with app:
        submitted = await app.submit("steps", {"count": 1}, Owner("alice"))
        reads = 0
        get = app.store.get

        async def failing(*args: Any, **kwargs: Any) -> Any:
            nonlocal reads
            reads += 1
            if reads > 2:  # the page's read and the stream's first one pass
                raise StoreUnavailable("connection to the database lost")
            return await get(*args, **kwargs)

        app.store.get = failing  # type: ignore[method-assign]
        transport = httpx.ASGITransport(app=create_app(app, token=TOKEN))
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as client:
            with caplog.at_level(logging.WARNING, logger="tasks_dashboard"):
                events = await client.get(f"/task/events?id={submitted.id}", headers=BEARER)
    assert 200 == events.status_code
    blocks = events.text.strip().split("\n\n")
    assert blocks[0].startswith("data: {")
    assert blocks[-1].startswith("event: end\ndata: ")
    ended = json.loads(blocks[-1].partition("data: ")[2])
    assert "StoreUnavailable: connection to the database lost" == ended["error"]
    logged = [r for r in caplog.records if r.name == "tasks_dashboard"]
    assert 1 == len(logged)
    assert logged[0].exc_info is None
    assert "connection to the database lost" in logged[0].getMessage()
