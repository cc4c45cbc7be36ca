"""The queues page's "finished last hour" where the store counts: counted per queue among
the :data:`~tasks_dashboard._reads.RECENT_PAGE` newest finished tasks (by submission) of
every finished status together — exact while they include one that finished before the
hour, else shown with "+" (at least that many). Tasks are finished through the store at
instants of its manual clock: two hours ago, then now."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from conftest import BEARER, TOKEN
from tasks_core import (
    App,
    Cancelled,
    Completed,
    Failed,
    ManualClock,
    Owner,
    Queue,
    SubmitItem,
    System,
    TaskContext,
)
from tasks_core.authority import Access
from tasks_dashboard import _reads, create_app
from tasks_store_memory import MemoryStore
from tasks_store_sql import SQLStore

pytestmark = pytest.mark.anyio

HOUR_S = 3600.0


@pytest.fixture(params=["memory", "sqlite"])
async def clocked(request: pytest.FixtureRequest,
                  tmp_path: Path) -> AsyncIterator[tuple[App, ManualClock]]:
    """An App on a store that counts, its clock two hours behind the dashboard's."""
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=2 * HOUR_S))
    store = (MemoryStore(clock=clock) if request.param == "memory"
             else await SQLStore.open(f"sqlite:///{tmp_path}/t.db", clock=clock))
    app = App(store=store, queues=[Queue("web"), Queue("mail")])

    @app.task(queue="web")
    async def job(ctx: TaskContext) -> None:
        del ctx

    async with app:
        yield app, clock


async def _finished(app: App, queue: str, ends: str) -> list[str]:
    """One task of ``queue`` per letter of ``ends`` (c completed, f failed, x cancelled),
    submitted in that order and ended at the store's instant."""
    submitted = await app.submit_many(
        [SubmitItem(task="job", queue=queue) for _ in ends], Owner("bob"))
    for task, end in zip(submitted, ends, strict=True):
        claim = await app.store.claim(task.id, "w", 30.0)
        if end == "x":
            await app.store.transition(task.id, claim.snapshot.revision, Cancelled(event_id="e"),
                                       Access(principal=System(), visibility="watchers"))
            continue
        event = Completed(event_id="e") if end == "c" else Failed(event_id="e", error="Boom")
        await app.store.transition(task.id, claim.snapshot.revision, event, claim.lease)
    return [task.id for task in submitted]


def _cell(html: str, queue: str) -> str:
    row = re.search(rf'<td><a href="/tasks\?queue={queue}">{queue}</a></td>(.*?)</tr>', html,
                    re.S)
    assert row is not None, queue
    return re.findall(r'<td class="num">([^<]*)</td>', row.group(1))[-1]


async def _page(app: App) -> str:
    transport = httpx.ASGITransport(app=create_app(app, token=TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://dash",
                                 headers=BEARER) as client:
        return (await client.get("/")).text


async def test_finished_last_hour_counts_every_finished_status_per_queue(
        clocked: tuple[App, ManualClock], monkeypatch: pytest.MonkeyPatch) -> None:
    app, clock = clocked
    monkeypatch.setattr(_reads, "RECENT_PAGE", 6)
    await _finished(app, "web", "cc")  # two hours ago: not in the last hour
    clock.advance(2 * HOUR_S)
    await _finished(app, "web", "cfx")
    await _finished(app, "mail", "x")
    overview = await _reads.overview(app, System())
    assert {"mail": 1, "web": 3} == {row.name: row.finished_last_hour
                                     for row in overview.queues}
    assert not overview.throughput_capped  # the sixth newest finished two hours ago
    html = await _page(app)
    assert ("3", "1") == (_cell(html, "web"), _cell(html, "mail"))


async def test_only_a_queue_whose_newest_all_finished_in_the_hour_is_at_least(
        clocked: tuple[App, ManualClock], monkeypatch: pytest.MonkeyPatch) -> None:
    """When the newest finished tasks of all queues together all finished within the hour,
    each queue is read on its own: "+" MUST mark only a queue whose own newest
    :data:`~tasks_dashboard._reads.RECENT_PAGE` finished within the hour — never "0+" or
    "1+" on a queue whose count is exact (it was shown on every row)."""
    app, clock = clocked
    monkeypatch.setattr(_reads, "RECENT_PAGE", 4)
    await _finished(app, "web", "c")  # two hours ago
    await _finished(app, "mail", "c")
    clock.advance(2 * HOUR_S)
    await _finished(app, "web", "cxcf")
    await _finished(app, "mail", "f")
    overview = await _reads.overview(app, System())
    assert {"mail": 1, "web": 4} == {row.name: row.finished_last_hour
                                     for row in overview.queues}
    assert {"web"} == {row.name for row in overview.queues if row.finished_capped}
    html = await _page(app)
    assert ("4+", "1") == (_cell(html, "web"), _cell(html, "mail"))


async def test_finished_last_hour_is_exact_per_queue_past_the_shared_page(
        clocked: tuple[App, ManualClock], monkeypatch: pytest.MonkeyPatch) -> None:
    """The newest finished tasks of all queues together all within the hour, but each
    queue's own newest reaching past it: every count is exact, no "+"."""
    app, clock = clocked
    monkeypatch.setattr(_reads, "RECENT_PAGE", 4)
    await _finished(app, "web", "c")
    clock.advance(2 * HOUR_S)
    await _finished(app, "web", "cxc")
    await _finished(app, "mail", "fc")
    overview = await _reads.overview(app, System())
    assert {"mail": 2, "web": 3} == {row.name: row.finished_last_hour
                                     for row in overview.queues}
    html = await _page(app)
    assert ("3", "2") == (_cell(html, "web"), _cell(html, "mail"))
