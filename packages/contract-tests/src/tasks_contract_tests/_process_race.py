"""Claimers in separate processes, released together: each opens the store by URL, warms
its connection, waits at a barrier, then makes one ``claim_next`` with fleet-wide queue
limits and reports how many tasks it got. The URL runner's proof that ``max_running`` and
``rate`` hold across processes, not only across one process's coroutines and threads."""

from __future__ import annotations

import asyncio
import multiprocessing
from typing import Any

from tasks_core import TaskQuery, open_store
from tasks_core.storekit import QueueLimits

__all__ = ["race_processes"]

WAIT_S = 120.0
"""The longest a racer waits for the others at the barrier, or for its claim."""


async def _claim(url: str, namespace: str, limits: QueueLimits, barrier: Any) -> int:
    store = await open_store(url, namespace=namespace)
    try:
        await store.list(TaskQuery(tenant=None, limit=1))  # a warm connection
        await asyncio.to_thread(barrier.wait, WAIT_S)
        claims = await store.claim_next(f"p{multiprocessing.current_process().pid}", 60,
                                        queues=["limited"], limit=2,
                                        limits={"limited": limits})
        return len(claims)
    finally:
        await store.aclose()


def _racer(url: str, namespace: str, limits: QueueLimits, barrier: Any, results: Any) -> None:
    try:
        results.put(asyncio.run(_claim(url, namespace, limits, barrier)))
    except BaseException as exc:  # reported to the test, which fails on it
        results.put(repr(exc))


def race_processes(url: str, namespace: str, limits: QueueLimits, racers: int) -> list[Any]:
    """Run ``racers`` claimers, each in its own process (spawned: nothing shared but the
    database), released together; what each claimed (a count) or its error (text)."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(racers)
    results = context.Queue()
    processes = [context.Process(target=_racer, args=(url, namespace, limits, barrier, results))
                 for _ in range(racers)]
    for process in processes:
        process.start()
    try:
        return [results.get(timeout=WAIT_S) for _ in processes]
    finally:
        for process in processes:
            process.join(WAIT_S)
            if process.is_alive():
                process.kill()
