"""The baselines of the benchmark: what the database does with no store or runtime on top.

Measured in the same run as the figures they scale, so a ratio compares like with like:

- ``update``: a bare single-row ``UPDATE`` per commit (autocommit), ``connections``
  clients at once, each on its own row;
- ``update+insert``: ``UPDATE … WHERE id AND revision`` plus ``INSERT`` of an event row in
  one transaction — the least a fenced, recorded completion can cost one at a time.

PostgreSQL runs through asyncpg directly (prepared statements, no SQLAlchemy at run time);
SQLite through the ``sqlite3`` module (WAL, ``synchronous=FULL``, one writer). The
statements are SQLAlchemy Core constructs compiled once for the driver: no SQL is built
from strings.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateTable, DropTable, ExecutableDDLElement
from sqlalchemy.sql.compiler import DDLCompiler

__all__ = [
    "PAYLOAD",
    "CreateDatabase",
    "database_commits",
    "postgres_baselines",
    "sqlite_baselines",
]

PAYLOAD = json.dumps({"event": {"kind": "completed", "event_id": "x" * 40, "result": None},
                      "revision": 1, "status": "completed", "committed_at": "2026-01-01"})
"""An event record of the size the store writes."""
_PG = asyncpg_dialect.dialect()  # type: ignore[no-untyped-call]
_LITE = sqlite_dialect.dialect()
_ONE = sa.literal_column("1", sa.Integer)
_ZERO = sa.literal_column("0", sa.Integer)


class CreateDatabase(ExecutableDDLElement):
    """``CREATE DATABASE <name>``, the name quoted by the dialect."""

    def __init__(self, name: str) -> None:
        self.name = name


@compiles(CreateDatabase)
def _create_database(element: CreateDatabase, compiler: DDLCompiler, **_: Any) -> str:
    return "CREATE DATABASE " + compiler.preparer.quote(element.name)


def _tables(prefix: str) -> tuple[sa.Table, sa.Table]:
    md = sa.MetaData()
    rows = sa.Table(
        prefix + "bench_rows", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("n", sa.Integer, nullable=False),
    )
    events = sa.Table(
        prefix + "bench_events", md,
        sa.Column("task_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("revision", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("record", sa.Text, nullable=False),
    )
    return rows, events


def _sql(statement: sa.ClauseElement, dialect: sa.Dialect) -> str:
    return str(statement.compile(dialect=dialect))


def _statements(prefix: str, dialect: sa.Dialect) -> dict[str, str]:
    """The baseline statements for ``dialect``, positional parameters in this order:
    ``bump(id)``, ``fenced(id, revision)``, ``record(task_id, revision, committed_at,
    record)``, ``seed(id)``."""
    rows, events = _tables(prefix)
    bump = rows.update().where(rows.c.id == sa.bindparam("a")).values(n=rows.c.n + _ONE)
    fenced = (
        rows.update()
        .where(rows.c.id == sa.bindparam("a"), rows.c.revision == sa.bindparam("b"))
        .values(revision=rows.c.revision + _ONE)
    )
    record = events.insert().values(
        task_id=sa.bindparam("a"), revision=sa.bindparam("b"),
        committed_at=sa.bindparam("c"), record=sa.bindparam("d"),
    )
    seed = rows.insert().values(id=sa.bindparam("a"), revision=_ZERO, n=_ZERO)
    return {
        "create_rows": _sql(CreateTable(rows), dialect),
        "create_events": _sql(CreateTable(events), dialect),
        "drop_rows": _sql(DropTable(rows, if_exists=True), dialect),
        "drop_events": _sql(DropTable(events, if_exists=True), dialect),
        "bump": _sql(bump, dialect),
        "fenced": _sql(fenced, dialect),
        "record": _sql(record, dialect),
        "seed": _sql(seed, dialect),
    }


async def _loop(
    connections: list[Any], seconds: float, step: Callable[[Any, int, int], Awaitable[None]]
) -> float:
    """Run ``step(conn, client, i)`` on every connection until ``seconds`` pass; ops/s."""
    counts = [0] * len(connections)
    deadline = time.perf_counter() + seconds

    async def client(index: int) -> None:
        conn = connections[index]
        while time.perf_counter() < deadline:
            await step(conn, index, counts[index])
            counts[index] += 1

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(len(connections))))
    return sum(counts) / (time.perf_counter() - started)


async def postgres_baselines(
    dsn: str, prefix: str, *, connections: int, seconds: float
) -> dict[str, float]:
    """The PostgreSQL baselines (see the module docstring), in operations per second."""
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    sql = _statements(prefix, _PG)
    admin = await asyncpg.connect(dsn)
    try:
        for name in ("drop_events", "drop_rows", "create_rows", "create_events"):
            await admin.execute(sql[name])
        await admin.executemany(sql["seed"], [(i,) for i in range(connections)])
        pool = [await asyncpg.connect(dsn) for _ in range(connections)]
        try:

            async def update(conn: Any, client: int, _: int) -> None:
                await conn.execute(sql["bump"], client)

            async def fenced(conn: Any, client: int, i: int) -> None:
                async with conn.transaction():
                    status = await conn.execute(sql["fenced"], client, i)
                    if status != "UPDATE 1":
                        raise AssertionError("the fenced update missed")
                    await conn.execute(sql["record"], client, i + 1, datetime.now(UTC), PAYLOAD)

            return {
                "update": await _loop(pool, seconds, update),
                "update+insert": await _loop(pool, seconds, fenced),
            }
        finally:
            for conn in pool:
                await conn.close()
    finally:
        for name in ("drop_events", "drop_rows"):
            await admin.execute(sql[name])
        await admin.close()


def sqlite_baselines(path: str, *, seconds: float) -> dict[str, float]:
    """The SQLite baselines (see the module docstring): one writer, ops/s."""
    sql = _statements("", _LITE)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        for name in ("drop_events", "drop_rows", "create_rows", "create_events"):
            conn.execute(sql[name])
        conn.execute(sql["seed"], (0,))
        figures: dict[str, float] = {}
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            conn.execute(sql["bump"], (0,))
            count += 1
        figures["update"] = count / (time.perf_counter() - started)
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            conn.execute("BEGIN IMMEDIATE")
            if conn.execute(sql["fenced"], (0, count)).rowcount != 1:
                raise AssertionError("the fenced update missed")
            conn.execute(sql["record"], (0, count + 1, datetime.now(UTC).isoformat(), PAYLOAD))
            conn.execute("COMMIT")
            count += 1
        figures["update+insert"] = count / (time.perf_counter() - started)
        return figures
    finally:
        conn.close()


async def database_commits(dsn: str, *, settle: float = 10.0) -> int:
    """``pg_stat_database.xact_commit`` of the database of ``dsn`` once every other
    session on it has ended (a session flushes its statistics when it exits)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            others = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            if not others:
                break
            await asyncio.sleep(0.05)
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        value = await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return int(value)
    finally:
        await conn.close()
