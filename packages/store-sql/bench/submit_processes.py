"""Serial submits from several processes at once on PostgreSQL, ours against pgqueuer's
enqueue from as many processes, in the same run (run by ``submits.py``).

For each count of processes (``--processes``), ``--rounds`` pairs (which goes first
alternating): that many processes (``spawn``), each with its own connection, make 20
untimed calls, wait for the others (a barrier), then make ``--serial`` calls one after
another — ours ``app.submit`` into one fresh namespace, pgqueuer's ``enqueue`` of one job
into its freshly installed tables. The rate is every process's calls over the time from
the first start to the last end: the fleet's submit rate, which a lock every creator
takes (and holds until its commit) caps however many processes submit.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import secrets
import time
from functools import partial
from multiprocessing.synchronize import Barrier
from typing import Any

import peers
from bench import OWNER, Probe, in_turn, make_app
from tasks_store_sql import SQLStore
from tasks_store_sql.plugin import drop_namespace

__all__ = ["run"]

_WARM_UP = 20


def _ours(url: str, namespace: str, calls: int, barrier: Barrier,
          spans: multiprocessing.Queue[tuple[float, float]]) -> None:
    """A process of ours: ``calls`` submits after the warm-up and the barrier."""
    async def main() -> None:
        store = await SQLStore.open(url, namespace=namespace)
        try:
            app = make_app(store, Probe())
            for _ in range(_WARM_UP):
                await app.submit("noop", None, OWNER)
            barrier.wait()
            started = time.perf_counter()
            for _ in range(calls):
                await app.submit("noop", None, OWNER)
            spans.put((started, time.perf_counter()))
        finally:
            await store.aclose()

    asyncio.run(main())


def _theirs(dsn: str, calls: int, barrier: Barrier,
            spans: multiprocessing.Queue[tuple[float, float]]) -> None:
    """A process of pgqueuer's: ``calls`` enqueues after the warm-up and the barrier."""
    async def main() -> None:
        import asyncpg
        from pgqueuer.queries import Queries

        conn = await asyncpg.connect(dsn)
        try:
            queries = Queries.from_asyncpg_connection(conn)
            for _ in range(_WARM_UP):
                await queries.enqueue("noop", None, 0)
            barrier.wait()
            started = time.perf_counter()
            for _ in range(calls):
                await queries.enqueue("noop", None, 0)
            spans.put((started, time.perf_counter()))
        finally:
            await conn.close()

    asyncio.run(main())


def _fleet(target: Any, args: tuple[Any, ...], processes: int, calls: int) -> float:
    """Calls/s of ``processes`` processes running ``target(*args, calls, barrier, spans)``."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    spans: multiprocessing.Queue[tuple[float, float]] = context.Queue()
    children = [context.Process(target=target, args=(*args, calls, barrier, spans))
                for _ in range(processes)]
    for child in children:
        child.start()
    times = [spans.get(timeout=600) for _ in children]
    for child in children:
        child.join()
        if child.exitcode != 0:
            raise RuntimeError(f"a submitting process exited with {child.exitcode}")
    return processes * calls / (max(end for _, end in times) - min(s for s, _ in times))


async def ours(url: str, processes: int, calls: int) -> float:
    """Tasks/s of ``processes`` processes submitting into one fresh namespace."""
    namespace = "fleet_" + secrets.token_hex(3)
    store = await SQLStore.open(url, namespace=namespace)  # the tables, made once
    await store.aclose()
    try:
        return await asyncio.to_thread(_fleet, _ours, (url, namespace), processes, calls)
    finally:
        await drop_namespace(url, namespace)


async def theirs(peer: str, processes: int, calls: int) -> float:
    """Jobs/s of ``processes`` processes enqueueing into pgqueuer's fresh tables."""
    await peers.pgqueuer_install(peer)
    return await asyncio.to_thread(_fleet, _theirs, (peer,), processes, calls)


async def run(url: str, peer: str, counts: list[int], calls: int,
              rounds: int) -> dict[str, list[dict[str, float]]]:
    """Per count of processes, ``rounds`` pairs of ours and pgqueuer's rates."""
    report = {}
    for processes in counts:
        pairs = []
        for n in range(rounds):
            mine, other = await in_turn(n, partial(ours, url, processes, calls),
                                        partial(theirs, peer, processes, calls))
            pairs.append({"ours": round(mine, 1), "pgqueuer": round(other, 1),
                          "ratio": round(mine / other, 3)})
        report[str(processes)] = pairs
    return report
