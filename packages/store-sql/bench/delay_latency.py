"""Start delay of delayed tasks (``bench.py``: on PostgreSQL after the burn-down rounds;
``--delay-latency``: only this, on each store of ``--stores``).

An idle ``Worker`` (``--concurrency``, every other setting default) while a second ``App``
with a store of its own submits, one after another over ``--delay-spread`` seconds,
``--delayed`` tasks due ``DELAY_S`` after their submit (a third at ``run_at`` instants on a
``GRID_S`` grid, so several share one) and a third as many fresh ones among them.
Reported, once every task completed: ``started_at - run_at`` of the delayed tasks and
``started_at - created_at`` of the fresh ones, in ms (p50/p90/p99/max; both instants of
the store's clock), and how many started before their ``run_at`` (none, when right).
A benchmark, never a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench import OWNER, Target, _dsn, _ensure_database, targets
from tasks_core import App, Snapshot, TaskContext, TaskStatus, TaskStore

TASK = "delay_noop"
DELAY_S = (0.2, 1.0)
"""How long after its submit a delayed task is due: uniform within."""
GRID_S = 0.25
"""The spacing of the shared ``run_at`` instants."""
FETCH = 50
"""Snapshots read at once when the run is over."""


class Ran:
    """The worker side's count of handlers run."""

    def __init__(self, goal: int) -> None:
        self.goal = goal
        self.count = 0
        self.done = asyncio.Event()

    def hit(self) -> None:
        self.count += 1
        if self.count >= self.goal:
            self.done.set()


def make_app(store: TaskStore, ran: Ran | None = None) -> App:
    """An app on ``store`` with the no-op ``delay_noop`` task (run only where ``ran`` is)."""
    app = App(store=store)

    @app.task(name=TASK)
    async def delay_noop(ctx: TaskContext) -> None:
        assert ran is not None, "the submitting app never runs a handler"
        ran.hit()

    return app


def plan(delayed: int, seed: int) -> list[str]:
    """The order of the submits: ``delay`` (``delay=``), ``shared`` (``run_at=`` on the
    grid) and ``fresh`` (neither) — a third of the delayed ones shared, a third as many
    fresh as delayed — shuffled by ``seed``."""
    shared = delayed // 3
    kinds = (["delay"] * (delayed - shared) + ["shared"] * shared
             + ["fresh"] * max(1, delayed // 3))
    random.Random(seed).shuffle(kinds)
    return kinds


async def submit_all(app: App, kinds: list[str], spread: float,
                     seed: int) -> dict[str, list[str]]:
    """Submit one task per entry of ``kinds``, one after another, paced evenly over
    ``spread`` seconds; the ids of each kind."""
    draws = random.Random(seed + 1)
    store = await app.open()
    base = await store.now()  # the store's clock, once: the grid's origin
    begin = time.perf_counter()
    interval = spread / len(kinds)
    ids: dict[str, list[str]] = {"delay": [], "shared": [], "fresh": []}
    for seq, kind in enumerate(kinds):
        pause = begin + seq * interval - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        if kind == "delay":
            submitted = await app.submit(TASK, None, OWNER, delay=draws.uniform(*DELAY_S))
        elif kind == "shared":
            # due between DELAY_S[0] and DELAY_S[1] from now, rounded up onto the grid
            ahead = time.perf_counter() - begin + draws.uniform(DELAY_S[0], DELAY_S[1] - GRID_S)
            due = base + timedelta(seconds=math.ceil(ahead / GRID_S) * GRID_S)
            submitted = await app.submit(TASK, None, OWNER, run_at=due)
        else:
            submitted = await app.submit(TASK, None, OWNER)
        ids[kind].append(submitted.id)
    return ids


async def read_all(store: TaskStore, ids: list[str]) -> list[Snapshot]:
    """Every task's snapshot, ``FETCH`` at a time."""
    found: list[Snapshot] = []
    for first in range(0, len(ids), FETCH):
        found += await asyncio.gather(*(store.get(task_id, tenant=None)
                                        for task_id in ids[first:first + FETCH]))
    return found


def _ms(later: datetime | None, earlier: datetime | None) -> float:
    if later is None or earlier is None:
        raise AssertionError("a task lacks an instant")
    return (later - earlier).total_seconds() * 1000


def _cuts(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"count": len(values), "min": round(values[0], 2), "p50": round(cuts[49], 2),
            "p90": round(cuts[89], 2), "p99": round(cuts[98], 2), "max": round(values[-1], 2)}


async def measure(target: Target, args: argparse.Namespace) -> dict[str, Any]:
    """The figures of one store: a default worker on one store instance, the submits
    through an app on another."""
    kinds = plan(args.delayed, args.seed)
    ran = Ran(len(kinds))
    store = await target.open()
    try:
        other = await target.second(store)
        try:
            worker = make_app(store, ran).worker(concurrency=args.concurrency)
            settings = {"concurrency": worker.concurrency, "poll_interval": worker.poll_interval,
                        "prefetch": worker.prefetch, "lease_for": worker.lease_for}
            running = asyncio.create_task(worker.run())
            try:
                await asyncio.sleep(0.3)  # let it go idle (and start listening)
                started = time.perf_counter()
                ids = await submit_all(make_app(other), kinds, args.delay_spread, args.seed)
                submitting = time.perf_counter() - started
                await asyncio.wait_for(ran.done.wait(), DELAY_S[1] + GRID_S + 30)
            finally:
                await worker.shutdown(drain_timeout=30)
                await running
        finally:
            if other is not store:
                await target.close(other)
        read = {kind: await read_all(store, found) for kind, found in ids.items()}
    finally:
        await target.close(store)
    return _figures(read, settings, submitting)


def _figures(read: dict[str, list[Snapshot]], settings: dict[str, Any],
             submitting: float) -> dict[str, Any]:
    every = [s for found in read.values() for s in found]
    wrong = [s.id for s in every if s.status != TaskStatus.COMPLETED or s.deliveries != 1]
    if wrong:
        raise AssertionError(f"{len(wrong)} tasks not completed exactly once, e.g. {wrong[0]}")
    delayed = read["delay"] + read["shared"]
    late = {"delayed": [_ms(s.started_at, s.run_at) for s in delayed],
            "shared": [_ms(s.started_at, s.run_at) for s in read["shared"]],
            "fresh": [_ms(s.started_at, s.created_at) for s in read["fresh"]]}
    ahead = [_ms(s.run_at, s.created_at) for s in delayed]
    instants: dict[datetime | None, int] = {}
    for s in read["shared"]:
        instants[s.run_at] = instants.get(s.run_at, 0) + 1
    return {
        "worker": settings, "submit_seconds": round(submitting, 2),
        "submits_per_s": round(len(every) / submitting, 1),
        "due_after_submit_ms": {"min": round(min(ahead), 1), "max": round(max(ahead), 1)},
        "shared_instants": len(instants), "most_at_one_instant": max(instants.values()),
        "start_delay_ms": {kind: _cuts(values) for kind, values in late.items()},
        "started_early": sum(1 for value in late["delayed"] if value < 0),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """The delay-latency mode of the bench: the JSON report."""
    report: dict[str, Any] = {"mode": "delay_latency", "delayed": args.delayed,
                              "spread_s": args.delay_spread, "concurrency": args.concurrency,
                              "seed": args.seed, "python": sys.version.split()[0],
                              "stores": {}}
    if "postgresql" in args.stores:
        await _ensure_database(_dsn(args))
    with tempfile.TemporaryDirectory(prefix="tasks-bench-") as tmp:
        async with targets(args, Path(tmp)) as chosen:
            for target in chosen:
                report["stores"][target.name] = await measure(target, args)
                target.release()
    return report


def heading(args: dict[str, Any]) -> str:
    """What was measured, in a line."""
    return (f"start delay, idle worker (concurrency={args['concurrency']}, other settings "
            f"default), submits from another app: {args['delayed']} delayed tasks due "
            f"{DELAY_S[0]:g}-{DELAY_S[1]:g} s after their submit (a third at shared instants, "
            f"{GRID_S:g} s apart) and {max(1, args['delayed'] // 3)} fresh ones, one after "
            f"another over {args['spread_s']:g} s")


def rows(name: str, figures: dict[str, Any]) -> list[str]:
    """The table's lines of one store."""
    labels = {"delayed": "delayed: started - run_at",
              "shared": "  of them at shared instants",
              "fresh": "fresh: started - created"}
    lines = []
    for kind, label in labels.items():
        c = figures["start_delay_ms"][kind]
        lines.append(f"{name:<11} {label:<29} {c['count']:>5} {c['p50']:>7.1f} {c['p90']:>7.1f}"
                     f" {c['p99']:>7.1f} {c['max']:>8.1f}")
    w = figures["worker"]
    lines.append(
        f"{'':<11} started before run_at: {figures['started_early']}; "
        f"{figures['shared_instants']} shared instants, at most "
        f"{figures['most_at_one_instant']} tasks at one; {figures['submits_per_s']:.0f} "
        f"submits/s; worker poll_interval {w['poll_interval']:g} s, prefetch {w['prefetch']}")
    return lines


def table(args: dict[str, Any], stores: dict[str, dict[str, Any]]) -> list[str]:
    """The heading, the column names and every store's lines."""
    lines = [heading(args),
             f"{'store':<11} {'ms (store clock)':<29} {'tasks':>5} {'p50':>7} {'p90':>7}"
             f" {'p99':>7} {'max':>8}"]
    for name, figures in stores.items():
        lines += rows(name, figures)
    return lines


def render(report: dict[str, Any]) -> str:
    """The human-readable table of ``--delay-latency``."""
    return "\n".join(table(report, report["stores"]))
