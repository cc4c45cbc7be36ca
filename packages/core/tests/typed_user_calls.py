"""Calls of the public API as a strictly typed application makes them — not a test module:
the typecheck session runs strict mypy on it. Each ``# type: ignore[...]`` marks a call a
type checker MUST refuse (strict mypy reports an ignore it no longer needs, so a call that
starts to pass fails the session); every other call MUST type-check."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from fractions import Fraction
from typing import Any

from tasks_core import App, Owner, TaskContext, Worker

app = App("memory://")
alice = Owner("alice")


@app.task
async def build_report(ctx: TaskContext, month: str) -> dict[str, str]:
    return {"month": month}


async def submits(given: Mapping[str, Any]) -> None:
    await build_report.submit(given, alice, key="r-11", delay=timedelta(minutes=5))
    await app.submit(build_report, given, alice, delay=Fraction(1, 2), ttl=30)
    await build_report.submit(given, alice, kye="r-11")  # type: ignore[call-arg]
    await build_report.submit(given, alice, delay="5")  # type: ignore[arg-type]
    app.sync.submit(build_report, given, alice, priority=3)
    app.sync.submit(build_report, given, alice, priorty=3)  # type: ignore[call-arg]
    app.sync.submit_many([], alice, transacton=None)  # type: ignore[call-arg]


async def workers() -> None:
    async with app.worker(concurrency=8, prefetch="auto", lease_for=Fraction(45, 2)):
        pass
    app.worker(concurency=8)  # type: ignore[call-arg]
    app.worker(lease_for="30")  # type: ignore[arg-type]
    await app.run_worker(queus=["reports"])  # type: ignore[call-arg]


class ReadyWorker(Worker):
    ready = True


async def subclassed() -> bool:
    async with ReadyWorker(app) as worker:
        return worker.ready
