"""How fast the dashboard's pages answer over a large PostgreSQL store.

Creates ``--tasks`` tasks (default 100,000) with ``app.submit_many`` in batches of 1000,
owned by ten users in turn, in a database of its own (``--database``, dropped and made
anew), cancels 1000 of them and leases 200 to a worker id, then times each page through
httpx against the ASGI app (in process, no network): one warm-up, then ``--runs``
requests each; prints the median, the maximum and how many tasks the page shows. The
pages are timed over four states of the store, one after the other:

- backlog: every task pending but the cancelled and the leased;
- backlog + completed: ``--mixed`` tasks completed — by ``--layout``, the oldest (as a
  worker that began on the backlog leaves it: the default) or spread evenly over the ids;
- history: a worker ran every pending task to completion but ``--mixed`` tasks of queue
  ``b`` (the oldest, or spread), leased beforehand so that it could not;
- history + pending: those leases released, the tasks pending again among the completed
  (as tasks whose worker died are).

Before each timing the database is vacuumed and analyzed, as autovacuum would. Last, the
size of each index of ``tasks`` per stored task. Figures belong in
packages/store-sql/bench/LOG.md, never here.

    python packages/dashboard/bench/pages.py --url postgresql://postgres@127.0.0.1/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any
from urllib.parse import quote

import httpx
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import ExecutableDDLElement
from sqlalchemy.sql.compiler import DDLCompiler
from tasks_core import (
    App,
    Claim,
    Owner,
    Queue,
    SubmitItem,
    System,
    TaskContext,
    TaskStatus,
)
from tasks_core.events import Completed
from tasks_dashboard import create_app
from tasks_dashboard._reads import stamp_id

TOKEN = "bench-token-not-secret"


class Database(ExecutableDDLElement):
    """``DROP DATABASE IF EXISTS <name>`` (``create=False``) or ``CREATE DATABASE <name>``,
    the name quoted by the dialect (DDL takes no bound parameters)."""

    def __init__(self, name: str, *, create: bool) -> None:
        self.name = name
        self.create = create


@compiles(Database)
def _database(element: Database, compiler: DDLCompiler, **_: Any) -> str:
    verb = "CREATE DATABASE " if element.create else "DROP DATABASE IF EXISTS "
    return verb + compiler.preparer.quote(element.name)


async def fresh_database(server_url: str, database: str) -> str:
    """Drop and create ``database`` on the server of ``server_url``; its URL."""
    url = sa.make_url(server_url).set(drivername="postgresql+asyncpg")
    engine = create_async_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    async with engine.connect() as conn:
        await conn.execute(Database(database, create=False))
        await conn.execute(Database(database, create=True))
    await engine.dispose()
    return url.set(drivername="postgresql", database=database).render_as_string(
        hide_password=False)


async def fill(app: App, count: int) -> tuple[list[str], set[str]]:
    """``count`` tasks in batches of 1000 over three queues (the n-th in queue "abc"[n %
    3]), each batch owned by one of ten users in turn; 1000 cancelled, 200 leased: every
    id in submission order and the leased ones."""
    ids: list[str] = []
    started = time.perf_counter()
    for start in range(0, count, 1000):
        items = [SubmitItem(task="bench", input={"n": n}, queue=("a", "b", "c")[n % 3])
                 for n in range(start, min(count, start + 1000))]
        owner = Owner(f"user{start // 1000 % 10}")
        ids += [s.id for s in await app.submit_many(items, owner)]
    print(f"submitted {len(ids)} tasks in {time.perf_counter() - started:.1f}s")
    for task_id in ids[:1000]:
        await app.cancel(task_id, System())
    leased = await app.store.claim_next("bench-worker-1", 3600.0, queues=["a", "b", "c"],
                                        limit=200)
    return ids, {claim.snapshot.id for claim in leased}


def chosen(ids: list[str], count: int, layout: str) -> list[str]:
    """``count`` of ``ids``: the oldest (``layout="oldest"``), else evenly spaced over them."""
    if layout == "oldest":
        return sorted(ids)[:count]
    step = max(1, len(ids) // max(1, count))
    return ids[step // 2::step][:count]


async def complete(app: App, ids: list[str]) -> None:
    """Claim each task of ``ids`` and complete it, as a worker would."""
    for task_id in ids:
        claim = await app.store.claim(task_id, "bench-mixer", 60.0)
        await app.store.transition(task_id, claim.snapshot.revision,
                                   Completed(event_id=f"bench-{task_id}"), claim.lease)


async def hold(app: App, ids: list[str]) -> list[Claim]:
    """Lease each task of ``ids`` for an hour (no worker claims it meanwhile)."""
    return [await app.store.claim(task_id, "bench-holder", 3600.0) for task_id in ids]


async def burn(app: App) -> None:
    """Run every pending task to completion with one worker (the 200 leased stay)."""
    started = time.perf_counter()
    worker = app.worker(concurrency=16)
    running = asyncio.create_task(worker.run())
    while True:
        counts = await app.store.counts(tenant=None)
        if not any(n for (_, status), n in counts.items() if status is TaskStatus.PENDING):
            break
        await asyncio.sleep(1.0)
    await worker.shutdown(drain_timeout=60)
    await running
    print(f"ran the backlog in {time.perf_counter() - started:.1f}s")


async def time_pages(client: httpx.AsyncClient, pages: dict[str, str], runs: int) -> None:
    print("| page | median ms | max ms | tasks shown |\n|---|---|---|---|")
    for name, path in pages.items():
        times = []
        shown = 0
        for run in range(runs + 1):
            began = time.perf_counter()
            response = await client.get(path)
            elapsed = (time.perf_counter() - began) * 1000
            response.raise_for_status()
            shown = response.text.count('href="/task?id=')
            if run:
                times.append(elapsed)
        print(f"| {name} | {statistics.median(times):.0f} | {max(times):.0f} | {shown} |",
              flush=True)


async def vacuum(app: App) -> None:
    """``VACUUM (ANALYZE)`` of the tables, as autovacuum would after a burst of writes (it
    may be off on a bench server): index-only scans need the pages marked all-visible."""
    engine = app.store.engine  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(sa.text("VACUUM (ANALYZE)"))


async def sizes(app: App, count: int) -> None:
    """Bytes of each index of ``tasks`` (and the table) per task of ``count``."""
    engine = app.store.engine  # type: ignore[attr-defined]
    query = sa.text("SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i JOIN pg_class c "
                    "ON c.oid = i.indexrelid WHERE i.indrelid = 'tasks'::regclass "
                    "UNION ALL SELECT 'tasks (table, with TOAST)', "
                    "pg_table_size('tasks'::regclass) ORDER BY 1")
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    print("| relation | bytes | bytes per task |\n|---|---|---|")
    for name, size in rows:
        print(f"| {name} | {size:,} | {size / count:.1f} |")


def pages_of(first: str, some_id: str) -> dict[str, str]:
    """The pages timed: their names and paths (``first``: the first task list's HTML)."""
    older = first.split('rel="next" href="')[1].split('"')[0]
    return {
        "queues": "/",
        "tasks (newest 50)": "/tasks",
        "tasks, next page": older.replace("&amp;", "&"),
        "tasks status=cancelled": "/tasks?status=cancelled",
        "tasks status=completed": "/tasks?status=completed",
        "tasks queue=b status=pending": "/tasks?queue=b&status=pending",
        "tasks owner=user3": "/tasks?owner=user3",
        "tasks owner=nobody": "/tasks?owner=nobody",
        "keyed tasks": "/tasks?view=keyed",
        "a task": f"/task?id={quote(some_id)}",
        "workers (200 leases)": "/workers",
    }


async def reuse(args: argparse.Namespace) -> None:
    """Time the pages over the database of an earlier run, as it is."""
    url = sa.make_url(args.url).set(drivername="postgresql", database=args.database)
    app = App(url.render_as_string(hide_password=False),
              queues=[Queue("a"), Queue("b"), Queue("c")])
    async with app:
        count = sum((await app.store.counts(tenant=None)).values())
        some = await app.list(System(), limit=1, after=stamp_id(0))
        transport = httpx.ASGITransport(app=create_app(app, token=TOKEN))
        headers = {"authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://bench",
                                     headers=headers) as client:
            pages = pages_of((await client.get("/tasks")).text, some.items[0].id)
            print(f"the database as it is: {count} tasks")
            await time_pages(client, pages, args.runs)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="any database of the PostgreSQL server to use")
    parser.add_argument("--database", default="tasks_dashboard_bench",
                        help="the bench's own database (dropped and made anew)")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--mixed", type=int, default=600,
                        help="tasks of the other status in the mixed states")
    parser.add_argument("--layout", choices=["oldest", "spread"], default="oldest",
                        help="which tasks the mixed states take: the oldest, or spread")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--reuse", action="store_true",
                        help="time the pages of the database a run left, as it is")
    parser.add_argument("--backlog-only", action="store_true",
                        help="stop after the backlog's pages, both states (no history)")
    args = parser.parse_args()
    if args.reuse:
        await reuse(args)
        return
    url = await fresh_database(args.url, args.database)
    app = App(url, queues=[Queue("a"), Queue("b"), Queue("c")])

    @app.task(name="bench", queue="a")
    async def bench(ctx: TaskContext, n: int) -> None:
        del ctx, n

    async with app:
        ids, leased = await fill(app, args.tasks)
        web = create_app(app, token=TOKEN)
        transport = httpx.ASGITransport(app=web)
        headers = {"authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://bench",
                                     headers=headers) as client:
            pages = pages_of((await client.get("/tasks")).text, ids[len(ids) // 2])
            await vacuum(app)
            print("backlog: every task pending but the cancelled and the leased")
            await time_pages(client, pages, args.runs)
            free = [(n, i) for n, i in enumerate(ids) if n >= 1000 and i not in leased]
            await complete(app, chosen([i for n, i in free if n % 2], args.mixed, args.layout))
            await vacuum(app)
            print(f"backlog + completed: {args.mixed} tasks ({args.layout}) completed")
            await time_pages(client, pages, args.runs)
            if args.backlog_only:
                return
            in_b = [i for n, i in free if n % 2 == 0 and n % 3 == 1]  # not completed
            held = await hold(app, chosen(in_b, args.mixed, args.layout))
            await burn(app)
            await vacuum(app)
            print(f"history: every task completed but the cancelled and the leased "
                  f"(200, and {len(held)} of queue b, {args.layout})")
            await time_pages(client, pages, args.runs)
            for claim in held:
                await app.store.release(claim.lease)
            await vacuum(app)
            print(f"history + pending: the {len(held)} of queue b released, pending")
            await time_pages(client, pages, args.runs)
        await sizes(app, args.tasks)


if __name__ == "__main__":
    asyncio.run(main())
