"""The pages over stores that count and stores that do not: exact counts from the store's
``counts`` (memory, a SQLite file), the capped counts of one ``list`` page per status when
the capability is off; newest first through a dense burst of submits; the owner filter
through the store's listing by principal, owners only."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from conftest import BEARER, TOKEN, build_app
from tasks_core import App, Owner, Queue, Snapshot, SubmitItem, System, TaskContext, TaskQuery
from tasks_dashboard import _reads, create_app
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


class UncountedStore(MemoryStore):
    """The memory store with its capability ``counts`` off (it then refuses to count)."""

    CAPABILITIES = MemoryStore.CAPABILITIES.model_copy(update={"counts": False})


def ids_on(html: str) -> list[str]:
    return [i.replace("%3A", ":") for i in re.findall(r'href="/task\?id=([^"]+)"', html)]


async def _client(app: App) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(app, token=TOKEN))
    return httpx.AsyncClient(transport=transport, base_url="http://dash", headers=BEARER)


@pytest.fixture(params=["memory", "sqlite", "uncounted"])
async def any_app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The test App on a store that counts (memory, a SQLite file) or does not."""
    if request.param == "uncounted":
        app = build_app(None, store=UncountedStore())
    else:
        url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/t.db"
        app = build_app(url)
    async with app:
        yield app


async def test_queue_counts_are_exact_when_the_store_counts(any_app: App) -> None:
    items = [SubmitItem(task="steps", input={"count": 1}) for _ in range(1200)]
    submitted = await any_app.submit_many(items[:600], Owner("bob"))
    submitted += await any_app.submit_many(items[600:], Owner("bob"))
    for task in submitted[:3]:
        await any_app.cancel(task.id, System())
    async with await _client(any_app) as client:
        page = (await client.get("/")).text
    counts = await _reads.counted(any_app, System())
    if counts is None:
        assert "This store does not count tasks" in page
        assert 'status=pending">1000+<' in page  # one page of list, capped
    else:
        assert {("web", "pending"): 1197, ("web", "cancelled"): 3} == {
            (q, s.value): n for (q, s), n in counts.items()}
        assert "Counts are exact" in page
        assert 'status=pending">1197<' in page
    assert 'status=cancelled">3<' in page


async def test_newest_first_pages_through_a_dense_burst(any_app: App) -> None:
    """1,500 tasks submitted in a burst (many per millisecond): every page newest first,
    each task exactly once, found from an upper bound well above the burst."""
    ids: list[str] = []
    for _ in range(3):
        ids += [s.id for s in await any_app.submit_many(
            [SubmitItem(task="steps", input={"count": 1}) for _ in range(500)], Owner("bob"))]
    seen: list[str] = []
    before: str | None = None
    for _ in range(40):
        listing = await _reads.newest(any_app, System(), before=before, limit=50)
        assert not listing.exhausted
        seen += [t.id for t in listing.items]
        if listing.next is None:
            break
        before = listing.next
    assert sorted(ids, reverse=True) == seen


async def test_newest_first_reads_less_than_a_burst_for_a_page_of_it(any_app: App) -> None:
    """The newest 50 of 1,000 tasks submitted in one burst (some milliseconds), with or
    without an owner filter: windows are read four pages at most before they narrow at
    the density read, so a page reads less than the burst (a filtered page read 1,000 at
    a time, then every millisecond of the burst whole)."""
    burst = await any_app.submit_many([SubmitItem(task="steps", input={"count": 1})
                                       for _ in range(1000)], Owner("bob"))
    newest = sorted((s.id for s in burst), reverse=True)[:50]
    listing = await _reads.newest(any_app, System(), limit=50)
    owned = await _reads.newest(any_app, System(), principal=Owner("bob"), limit=50,
                                keep=lambda task: task.owner == Owner("bob"))
    assert newest == [t.id for t in listing.items] == [t.id for t in owned.items]
    assert listing.scanned < len(burst)
    assert owned.scanned < len(burst)


class ListingCountedStore(MemoryStore):
    """The memory store, counting its ``list`` calls."""

    lists = 0

    async def list(self, query: TaskQuery) -> list[Snapshot]:
        self.lists += 1
        return await super().list(query)


async def test_a_filter_no_task_matches_lists_nothing_when_the_store_counts() -> None:
    store = ListingCountedStore()
    async with build_app(None, store=store) as app:
        await app.submit_many([SubmitItem(task="steps", input={"count": 1})
                               for _ in range(50)], Owner("bob"))
        async with await _client(app) as client:
            assert [] == ids_on((await client.get("/tasks?status=completed")).text)
            assert 0 == store.lists  # the counts said none
            assert 50 == len(ids_on((await client.get("/tasks?status=pending")).text))
            assert store.lists > 0


async def test_the_owner_filter_shows_the_owners_tasks_of_the_tenant_only(
        any_app: App) -> None:
    alice = await any_app.submit("steps", {"count": 1}, Owner("alice"))
    watched = await any_app.submit("steps", {"count": 1}, Owner("bob"),
                                   watchers=[Owner("alice")])
    acme = await any_app.submit("steps", {"count": 1}, Owner("alice", "acme"))
    async with await _client(any_app) as client:
        assert [alice.id] == ids_on((await client.get("/tasks?owner=alice")).text)
        assert [acme.id] == ids_on((await client.get("/tasks?owner=alice&tenant=acme")).text)
        assert [watched.id] == ids_on((await client.get("/tasks?owner=bob")).text)
        assert [] == ids_on((await client.get("/tasks?owner=nobody")).text)


async def test_finished_last_hour_counts_tasks_submitted_without_a_key(any_app: App) -> None:
    """The stores cannot count tasks by when they finished, and keyed ids carry no time to
    find the recent ones by: "finished last hour" counts tasks submitted without a key, on
    every store alike, and the page MUST say so (its header)."""
    for key in (None, "demo-1"):
        task = await any_app.submit("steps", {"count": 1}, Owner("bob"), key=key)
        await any_app.cancel(task.id, System())
    overview = await _reads.overview(any_app, System())
    assert {"web": 1} == {row.name: row.finished_last_hour for row in overview.queues}
    async with await _client(any_app) as client:
        page = (await client.get("/")).text
    header = re.search(r"<th[^>]*>finished last hour(.*?)</th>", page, re.S)
    assert header is not None
    assert "without a key" in header.group(1)


async def test_finished_last_hour_without_counts_marks_only_a_capped_queue(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without counts, the finished tasks of the last day are read one page at a time
    (:data:`~tasks_dashboard._reads.COUNT_CAP`); past one page each queue is read on its
    own, and "+" MUST mark only a queue whose own page was full — not every row."""
    monkeypatch.setattr(_reads, "COUNT_CAP", 3)
    app = App(store=UncountedStore(), queues=[Queue("web"), Queue("mail")])

    @app.task(queue="web")
    async def job(ctx: TaskContext) -> None:
        del ctx

    async with app:
        for queue, number in (("web", 4), ("mail", 1)):
            for _ in range(number):
                task = await app.submit("job", None, Owner("bob"), queue=queue)
                await app.cancel(task.id, System())
        overview = await _reads.overview(app, System(), app.queues)  # as the page does
        assert {"web": (3, True), "mail": (1, False)} == {
            row.name: (row.finished_last_hour, row.finished_capped) for row in overview.queues
            if row.name != "default"}
        async with await _client(app) as client:
            page = (await client.get("/")).text
    cells = {queue: re.search(rf'queue={queue}">{queue}</a></td>.*?<td class="num">([^<]*)'
                                rf'</td>\s*</tr>', page, re.S) for queue in ("web", "mail")}
    assert {"web": "3+", "mail": "1"} == {q: m.group(1) for q, m in cells.items() if m}
