"""Burn-down benchmark of the SQL store, reported as ratios to a baseline of the same run.

    python packages/store-sql/bench/bench.py --store-url sqlite:////tmp/bench.db
    python packages/store-sql/bench/bench.py --store-url postgresql://postgres@127.0.0.1/tasks_test

Baseline: empty transactions per second (``BEGIN; SELECT 1; COMMIT``) on the same
database, engine and event loop, one at a time. Every figure is also given as a multiple
of it, so runs on different machines compare: a ratio of 0.5 for "create" means creating a
task costs about two empty transactions. Nothing here asserts a speed; tests never time.

Measured (in a throw-away namespace, dropped afterwards):

- ``create``: tasks created one after another;
- ``burn-down``: ``--workers`` coroutines draining the queue with ``claim_next(limit=
  --batch)`` and a ``completed`` event per task (the hot path: claim -> run -> terminal);
- ``claim+complete``: the same with one worker and ``limit=1`` (per-task latency).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import time
from typing import Any

import sqlalchemy as sa
from tasks_core import Completed, NewTask, Owner, Work
from tasks_store_sql import SQLStore
from tasks_store_sql.plugin import drop_namespace


async def _baseline(store: SQLStore, seconds: float) -> float:
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        async with store.engine.begin() as conn:
            await conn.execute(sa.select(sa.literal(1)))
        count += 1
    return count / (time.perf_counter() - started)


async def _create(store: SQLStore, prefix: str, n: int) -> float:
    owner = Owner("bench")
    started = time.perf_counter()
    for i in range(n):
        await store.create(
            NewTask(id=f"{prefix}{i:07d}", tenant="default", owner=owner, work=Work(name="b"))
        )
    return n / (time.perf_counter() - started)


async def _burn(store: SQLStore, workers: int, batch: int) -> tuple[float, int]:
    done = 0

    async def worker(name: str) -> None:
        nonlocal done
        while claims := await store.claim_next(name, 60, queues=["default"], limit=batch):
            for claim in claims:
                await store.transition(
                    claim.snapshot.id, 0, Completed(event_id="done"), claim.lease
                )
                done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(f"w{i}") for i in range(workers)))
    return done / (time.perf_counter() - started), done


async def main(args: argparse.Namespace) -> dict[str, Any]:
    namespace = "bench_" + secrets.token_hex(3)
    store = await SQLStore.open(args.store_url, namespace=namespace)
    try:
        base = await _baseline(store, args.baseline_seconds)
        created = await _create(store, "a", args.tasks)
        burn, burned = await _burn(store, args.workers, args.batch)
        await _create(store, "b", args.tasks // 4)
        single, _ = await _burn(store, 1, 1)
    finally:
        await store.aclose()
        await drop_namespace(args.store_url, namespace)
    figures = {"create": created, "burn-down": burn, "claim+complete": single}
    return {
        "store": store.dialect,
        "tasks": args.tasks,
        "burned": burned,
        "workers": args.workers,
        "batch": args.batch,
        "baseline_tx_per_s": round(base, 1),
        "tasks_per_s": {k: round(v, 1) for k, v in figures.items()},
        "ratio_to_baseline": {k: round(v / base, 3) for k, v in figures.items()},
    }


def cli() -> None:
    """Parse arguments, run, print a table and the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store-url", required=True)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--baseline-seconds", type=float, default=2.0)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    report = asyncio.run(main(args))
    if not args.json:
        print(f"{report['store']}: baseline {report['baseline_tx_per_s']} empty tx/s")
        for name, rate in report["tasks_per_s"].items():
            ratio = report["ratio_to_baseline"][name]
            print(f"  {name:<16} {rate:>10.1f} tasks/s   x{ratio:.3f} of baseline")
    print(json.dumps(report))


if __name__ == "__main__":
    cli()
