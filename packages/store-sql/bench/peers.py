"""The peer of the benchmark: pgqueuer's burn-down, measured in the same run.

The issue's target is "at least pgqueuer's rate". Rather than scale a figure measured on
another machine, the bench runs pgqueuer itself here, right after our burn-down, on the
same PostgreSQL server: the same number of no-op jobs, enqueued in bulk beforehand, then
one ``QueueManager`` with pgqueuer's defaults (batch size 10, no concurrency limit) run in
``drain`` mode until the queue is empty — timed from its start until it returns.

pgqueuer installs tables, types and triggers of fixed names, so it runs in a database of
its own (``<bench database>_pgqueuer``, created when missing, its objects removed
afterwards). Without pgqueuer installed (``nox -s bench`` installs it) the peer is skipped
and the report says so. Its enqueue rates — one job per call, one after another, and lists
of ``ENQUEUE_BATCH`` — are measured here too, for ``submits.py``, as is huey's SQLite
enqueue (``huey_enqueue``), the peer of a submit on a SQLite file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import time
from collections.abc import Awaitable, Callable
from typing import Any

import cpu
import sqlalchemy as sa

__all__ = ["available", "huey_available", "huey_enqueue", "peer_dsn", "pgqueuer_burn_down",
           "pgqueuer_enqueue", "pgqueuer_install"]

ENQUEUE_BATCH = 1000


def available() -> bool:
    """Whether pgqueuer can be imported."""
    return importlib.util.find_spec("pgqueuer") is not None


def huey_available() -> bool:
    """Whether huey (the SQLite peer of ``submits.py``) can be imported."""
    return importlib.util.find_spec("huey") is not None


def huey_enqueue(path: str, jobs: int) -> float:
    """Jobs/s of huey's ``SqliteHuey`` enqueue (its defaults: WAL, the file's default
    ``synchronous``, a commit per job) of ``jobs`` no-op jobs one after another into a
    fresh file at ``path``, a first 20 not timed."""
    from huey import SqliteHuey

    huey = SqliteHuey(filename=path)

    @huey.task()
    def noop() -> None:
        """The job."""

    for _ in range(20):
        noop()
    started = time.perf_counter()
    for _ in range(jobs):
        noop()
    return jobs / (time.perf_counter() - started)


def peer_dsn(dsn: str) -> str:
    """The DSN of the peer's own database beside the bench database of ``dsn``."""
    url = sa.make_url(dsn)
    return url.set(database=f"{url.database}_pgqueuer").render_as_string(hide_password=False)


async def pgqueuer_enqueue(dsn: str, jobs: int, *, batch: int) -> float:
    """Jobs/s of pgqueuer's ``enqueue`` on fresh tables: ``batch`` 1, one job per call one
    after another (a first 20 not timed: connection and statement warm-up); else lists of
    ``batch`` jobs, one call after another."""
    import asyncpg
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn)
    try:
        queries = Queries.from_asyncpg_connection(conn)
        await _uninstall_quietly(queries)
        await queries.install()
        if batch == 1:
            for _ in range(20):
                await queries.enqueue("noop", None, 0)
            started = time.perf_counter()
            for _ in range(jobs):
                await queries.enqueue("noop", None, 0)
        else:
            started = time.perf_counter()
            for first in range(0, jobs, batch):
                size = min(batch, jobs - first)
                await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
        rate = jobs / (time.perf_counter() - started)
        await queries.uninstall()
        return rate
    finally:
        await conn.close()


async def pgqueuer_install(dsn: str) -> None:
    """pgqueuer's tables installed afresh (what an earlier run left removed first)."""
    import asyncpg
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn)
    try:
        queries = Queries.from_asyncpg_connection(conn)
        await _uninstall_quietly(queries)
        await queries.install()
    finally:
        await conn.close()


async def pgqueuer_burn_down(
    dsn: str, tasks: int, priorities: list[int] | None = None, *,
    before_uninstall: Callable[[Any], Awaitable[None]] | None = None,
) -> tuple[float, dict[str, float | None]]:
    """Jobs/s of one pgqueuer worker (defaults) burning down ``tasks`` queued no-op jobs
    (of ``priorities``, one per job; default all 0), and its CPU time per job
    (``cpu.per_task``: this process, the rest of the machine). ``before_uninstall(conn)``
    runs after the drain, before pgqueuer's tables are removed (``footprint.py``).

    Raises:
        RuntimeError: a job did not run exactly once.
    """
    import asyncpg
    from pgqueuer import QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    setup = await asyncpg.connect(dsn)
    try:
        queries = Queries.from_asyncpg_connection(setup)
        await _uninstall_quietly(queries)
        await queries.install()
        for first in range(0, tasks, ENQUEUE_BATCH):
            size = min(ENQUEUE_BATCH, tasks - first)
            await queries.enqueue(["noop"] * size, [None] * size,
                                  priorities[first:first + size] if priorities else [0] * size)
        worker = await asyncpg.connect(dsn)
        try:
            manager = QueueManager(Queries.from_asyncpg_connection(worker))
            ran = 0

            @manager.entrypoint("noop")
            async def noop(job: object) -> None:
                nonlocal ran
                ran += 1

            started, spent = time.perf_counter(), cpu.sample()
            await manager.run(mode=QueueExecutionMode.drain)
            elapsed = time.perf_counter() - started
            cpu_per_task = cpu.per_task(spent, cpu.sample(), tasks)
        finally:
            await worker.close()
        if ran != tasks:
            raise RuntimeError(f"pgqueuer ran {ran} of {tasks} jobs")
        if before_uninstall is not None:
            await before_uninstall(setup)
        await queries.uninstall()
        return tasks / elapsed, cpu_per_task
    finally:
        await setup.close()


async def _uninstall_quietly(queries: object) -> None:
    """Remove what an interrupted earlier run left (nothing there is fine)."""
    import asyncpg

    with contextlib.suppress(asyncpg.PostgresError):
        await queries.uninstall()  # type: ignore[attr-defined]
