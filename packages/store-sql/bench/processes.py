"""Burn-down by several worker processes on PostgreSQL, ours against pgqueuer's with the
same number of processes, in the same run (run alone, or by ``bench.py``).

For each count of processes (``--processes``, default 1, 2 and 4), ``--rounds`` pairs
(which goes first alternating): ``--process-tasks`` no-op tasks queued beforehand (ours
by ``submit_many`` in a fresh namespace; pgqueuer's enqueued in lists of 1000 in its own
database), then that many processes (``process_worker.py``) started, set up, and
released together; timed until the queue is empty — ours: the count of stored
``pending`` tasks, read every 20 ms, is 0 (every outcome written); pgqueuer's: every
process returned from its drain. The processes' logs (ours: INFO, as ``tasks worker``)
go nowhere. Reported: tasks/s, the ratio, and the worker processes' CPU per task.

    python packages/store-sql/bench/processes.py --process-tasks 20000 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import secrets
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import asyncpg
import bench
import peers
import sqlalchemy as sa
from tasks_core import SubmitItem
from tasks_store_sql._schema import Tables, pending, prefix_of
from tasks_store_sql.plugin import drop_namespace

__all__ = ["render", "run"]

BATCH = 1000
WORKER = str(Path(__file__).with_name("process_worker.py"))


async def _start(count: int, *args: str) -> list[asyncio.subprocess.Process]:
    """``count`` worker processes, each set up and waiting for its start."""
    children = [await asyncio.create_subprocess_exec(
        sys.executable, WORKER, *args, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        for _ in range(count)]
    for child in children:
        assert child.stdout is not None
        if (await child.stdout.readline()).strip() != b"ready":
            raise RuntimeError("a worker process did not start")
    return children


def _release(children: list[asyncio.subprocess.Process]) -> None:
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"go\n")


async def _finish(children: list[asyncio.subprocess.Process]) -> float:
    """Wait for every process; their CPU seconds together."""
    spent = 0.0
    for child in children:
        out, _ = await child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"a worker process failed ({child.returncode})")
        spent += float(out.split()[-1])
    return spent


async def ours(args: argparse.Namespace, dsn: str, processes: int) -> dict[str, float]:
    """Tasks/s and worker CPU µs per task of ``processes`` of our workers."""
    namespace = "proc_" + secrets.token_hex(3)
    target = bench._sql_target("postgresql", args.postgres_url, namespace, None)
    tasks = args.process_tasks
    try:
        store = await target.open()
        try:
            app = bench.make_app(store, bench.Probe())
            items = [SubmitItem(task="noop") for _ in range(tasks)]
            for first in range(0, tasks, BATCH):
                await app.submit_many(items[first:first + BATCH], bench.OWNER)
        finally:
            await target.close(store)
        table = Tables.build(prefix_of(namespace)).tasks
        left = str(sa.select(sa.func.count()).select_from(table).where(pending(table.c.status))
                   .compile(dialect=sa.dialects.postgresql.dialect()))
        conn = await asyncpg.connect(dsn)
        try:
            children = await _start(processes, "ours", args.postgres_url, namespace,
                                    str(args.concurrency))
            started = time.perf_counter()
            _release(children)
            while await conn.fetchval(left):  # noqa: ASYNC110 - another process's work
                await asyncio.sleep(0.02)  # polling: the figure's resolution
            elapsed = time.perf_counter() - started
            for child in children:
                child.send_signal(signal.SIGTERM)
            spent = await _finish(children)
        finally:
            await conn.close()
    finally:
        await drop_namespace(args.postgres_url, namespace)
    return {"rate": round(tasks / elapsed, 1), "cpu_us": round(spent / tasks * 1e6, 1)}


async def pgqueuer(args: argparse.Namespace, dsn: str, processes: int) -> dict[str, float]:
    """Jobs/s and worker CPU µs per job of ``processes`` pgqueuer processes."""
    from pgqueuer.queries import Queries

    peer = peers.peer_dsn(dsn)
    tasks = args.process_tasks
    setup = await asyncpg.connect(peer)
    try:
        queries = Queries.from_asyncpg_connection(setup)
        await peers._uninstall_quietly(queries)
        await queries.install()
        for first in range(0, tasks, BATCH):
            size = min(BATCH, tasks - first)
            await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
        children = await _start(processes, "pgqueuer", peer)
        started = time.perf_counter()
        _release(children)
        spent = await _finish(children)
        elapsed = time.perf_counter() - started
        if await setup.fetchval("SELECT count(*) FROM pgqueuer"):
            raise RuntimeError("pgqueuer's processes left jobs in the queue")
        await queries.uninstall()
    finally:
        await setup.close()
    return {"rate": round(tasks / elapsed, 1), "cpu_us": round(spent / tasks * 1e6, 1)}


async def run(args: argparse.Namespace, dsn: str) -> dict[str, Any]:
    """Per count of processes, ``--rounds`` pairs and the median ratio."""
    await bench._ensure_database(peers.peer_dsn(dsn))
    report: dict[str, Any] = {"tasks": args.process_tasks, "concurrency": args.concurrency,
                              "counts": {}}
    for processes in args.processes:
        pairs = []
        for n in range(args.rounds):
            mine, theirs = await bench.in_turn(n, functools.partial(ours, args, dsn, processes),
                                               functools.partial(pgqueuer, args, dsn, processes))
            pairs.append({"ours": mine, "pgqueuer": theirs,
                          "ratio": round(mine["rate"] / theirs["rate"], 3)})
        report["counts"][str(processes)] = pairs
    return report


def _column(pairs: list[dict[str, Any]], side: str, key: str, spec: str) -> str:
    return " ".join(format(p[side][key], spec) for p in pairs)


def render(report: dict[str, Any]) -> list[str]:
    """One line per count of processes: rates, CPU per task, ratios and their median."""
    lines = [f"burn-down by worker processes on PostgreSQL ({report['tasks']} tasks, "
             f"concurrency {report['concurrency']} each; ours vs pgqueuer, same run):"]
    for processes, pairs in report["counts"].items():
        ratios = [p["ratio"] for p in pairs]
        median = statistics.median(ratios)
        lines.append(
            f"  {processes} process(es): {_column(pairs, 'ours', 'rate', '>6.0f')}/s "
            f"({_column(pairs, 'ours', 'cpu_us', '.0f')} µs/task) vs "
            f"{_column(pairs, 'pgqueuer', 'rate', '>6.0f')}/s "
            f"({_column(pairs, 'pgqueuer', 'cpu_us', '.0f')} µs/task)  ratios "
            f"{' '.join(f'{r:.2f}' for r in ratios)}  median {median:.2f} "
            f"(target >= 1: {'met' if median >= 1 else 'NOT met'})")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This stage's options (also ``bench.py``'s)."""
    parser.add_argument("--process-tasks", type=int, default=20_000,
                        help="processes: the backlog each burn-down starts from")
    parser.add_argument("--processes", type=lambda text: [int(n) for n in text.split(",")],
                        default=[1, 2, 4], help="processes: the counts, comma-separated")


def main() -> None:
    """Parse arguments, run, print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--postgres-url", default=bench.POSTGRES_URL)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    add_arguments(parser)
    args = parser.parse_args()
    dsn = bench._dsn(args)

    async def measured() -> dict[str, Any]:
        await bench._ensure_database(dsn)
        return await run(args, dsn)

    print("\n".join(render(asyncio.run(measured()))))


if __name__ == "__main__":
    main()
