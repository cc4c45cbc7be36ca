"""How fast the dashboard's pages answer over a large PostgreSQL store.

Creates ``--tasks`` tasks (default 100,000) with ``app.submit_many`` in batches of 1000
in a database of its own (dropped and made anew), cancels 1000 of them and leases 200 to
a worker id, then times each page through httpx against the ASGI app (in process, no
network): one warm-up, then ``--runs`` requests each; prints the median and the maximum.
Figures belong in packages/store-sql/bench/LOG.md, never here.

    python packages/dashboard/bench/pages.py --url postgresql://postgres@127.0.0.1/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from urllib.parse import quote

import httpx
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from tasks_core import App, Queue, SubmitItem, System
from tasks_dashboard import create_app

DATABASE = "tasks_dashboard_bench"
TOKEN = "bench-token-not-secret"


async def fresh_database(server_url: str) -> str:
    """Drop and create :data:`DATABASE` on the server of ``server_url``; its URL."""
    url = sa.make_url(server_url).set(drivername="postgresql+asyncpg")
    engine = create_async_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    async with engine.connect() as conn:
        await conn.execute(sa.text(f"DROP DATABASE IF EXISTS {DATABASE}"))
        await conn.execute(sa.text(f"CREATE DATABASE {DATABASE}"))
    await engine.dispose()
    return url.set(drivername="postgresql", database=DATABASE).render_as_string(
        hide_password=False)


async def fill(app: App, count: int) -> list[str]:
    """``count`` tasks in batches of 1000 over three queues; 1000 cancelled, 200 leased."""
    ids: list[str] = []
    started = time.perf_counter()
    for start in range(0, count, 1000):
        items = [SubmitItem(task="bench", input={"n": n}, queue=("a", "b", "c")[n % 3])
                 for n in range(start, min(count, start + 1000))]
        ids += [s.id for s in await app.submit_many(items, System())]
    print(f"submitted {len(ids)} tasks in {time.perf_counter() - started:.1f}s")
    for task_id in ids[:1000]:
        await app.cancel(task_id, System())
    await app.store.claim_next("bench-worker-1", 600.0, queues=["a", "b", "c"], limit=200)
    return ids


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="any database of the PostgreSQL server to use")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    url = await fresh_database(args.url)
    app = App(url, queues=[Queue("a"), Queue("b"), Queue("c")])
    async with app:
        ids = await fill(app, args.tasks)
        web = create_app(app, token=TOKEN)
        transport = httpx.ASGITransport(app=web)
        headers = {"authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://bench",
                                     headers=headers) as client:
            first = await client.get("/tasks")
            older = first.text.split('rel="next" href="')[1].split('"')[0]
            pages = {
                "queues": "/",
                "tasks (newest 50)": "/tasks",
                "tasks, next page": older.replace("&amp;", "&"),
                "tasks status=cancelled": "/tasks?status=cancelled",
                "tasks queue=b status=pending": "/tasks?queue=b&status=pending",
                "tasks owner=nobody (scan budget)": "/tasks?owner=nobody",
                "keyed tasks": "/tasks?view=keyed",
                "a task": f"/task?id={quote(ids[len(ids) // 2])}",
                "workers (200 leases)": "/workers",
            }
            print("| page | median ms | max ms | runs |\n|---|---|---|---|")
            for name, path in pages.items():
                times = []
                for run in range(args.runs + 1):
                    began = time.perf_counter()
                    response = await client.get(path)
                    elapsed = (time.perf_counter() - began) * 1000
                    response.raise_for_status()
                    if run:
                        times.append(elapsed)
                print(f"| {name} | {statistics.median(times):.0f} | {max(times):.0f} | "
                      f"{args.runs} |")


if __name__ == "__main__":
    asyncio.run(main())
