"""Submit rates, each beside its reference measured in the same run (run by ``bench.py``).

- PostgreSQL against pgqueuer (its database beside the bench's, ``peers.py``), in
  ``--rounds`` pairs back to back, the order alternating: ``app.submit`` one after another
  against ``enqueue`` of one job per call (``--serial`` each), and ``app.submit_many``
  of 1000 against ``enqueue`` of lists of 1000 (``--bulk`` each); and ``app.submit``
  one after another from several processes at once (``--processes``) against
  ``enqueue`` from as many (``submit_processes.py``);
- the burn-down of a backlog with mixed priorities (uniform in -5..5, ``--seed``) against
  the same without (all 0) — the two alternating which goes first — and against
  pgqueuer's burn-down of jobs of the same priorities, each round;
- on a SQLite file against huey (``SqliteHuey``, ``peers.huey_enqueue``): ``app.submit``
  one after another against huey's enqueue of one job per call (``--serial`` each, a
  fresh file each), in ``--rounds`` pairs as above;
- SQLite (a file) and MariaDB (``--mariadb-url``, skipped when it does not answer):
  ``app.submit_many`` of 1000 against a bare loop of multi-row ``INSERT`` statements (1000
  rows each, its own transaction, the store's engine settings) of the very rows the
  store wrote, into a table of the store's ``tasks`` definition (indexes included).
Every measurement starts on fresh tables; ratios are per round, then their median.
"""

from __future__ import annotations

import argparse
import itertools
import random
import secrets
import socket
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import peers
import sqlalchemy as sa
import submit_processes
from bench import OWNER, Probe, _sql_target, burn_down, check, in_turn, make_app
from tasks_core import App, SubmitItem
from tasks_store_sql import SQLStore
from tasks_store_sql._dialect import create_engine
from tasks_store_sql._schema import Tables
from tasks_store_sql._url import parse_url
from tasks_store_sql.plugin import drop_namespace

__all__ = ["render", "run"]

BATCH = 1000
PRIORITIES = range(-5, 6)


@asynccontextmanager
async def _fresh(url: str, namespace: str | None = None) -> AsyncIterator[App]:
    """An app on a store of ``url`` in a new namespace (``namespace``, else a random one),
    its tables dropped afterwards."""
    namespace = namespace or "sub_" + secrets.token_hex(3)
    store = await SQLStore.open(url, namespace=namespace)
    try:
        yield make_app(store, Probe())
    finally:
        await store.aclose()
        await drop_namespace(url, namespace)


def _items(count: int, priorities: list[int] | None = None) -> list[list[SubmitItem]]:
    """``count`` no-op items in batches of :data:`BATCH`."""
    items = [SubmitItem(task="noop", priority=None if priorities is None else priorities[n])
             for n in range(count)]
    return [items[n:n + BATCH] for n in range(0, count, BATCH)]


async def _submit_many(app: App, batches: list[list[SubmitItem]]) -> float:
    """Tasks/s of ``app.submit_many`` of ``batches``, one call after another."""
    started = time.perf_counter()
    for batch in batches:
        await app.submit_many(batch, OWNER)
    return sum(map(len, batches)) / (time.perf_counter() - started)


async def ours_serial(url: str, count: int) -> float:
    """Tasks/s of ``app.submit`` one after another (a first 20 not timed, as pgqueuer's)."""
    async with _fresh(url) as app:
        for _ in range(20):
            await app.submit("noop", None, OWNER)
        started = time.perf_counter()
        for _ in range(count):
            await app.submit("noop", None, OWNER)
        return count / (time.perf_counter() - started)


async def ours_bulk(url: str, count: int) -> float:
    """Tasks/s of ``app.submit_many`` of :data:`BATCH` at a time."""
    async with _fresh(url) as app:
        return await _submit_many(app, _items(count))


async def _pairs(
    rounds: int, ours: Any, theirs: Any, peer: str = "pgqueuer"
) -> list[dict[str, float]]:
    """``rounds`` pairs of ``ours()`` and ``theirs()`` (the reference, named ``peer``), the
    first of each alternating."""
    pairs = []
    for n in range(rounds):
        mine, other = await in_turn(n, ours, theirs)
        pairs.append({"ours": round(mine, 1), peer: round(other, 1),
                      "ratio": round(mine / other, 3)})
    return pairs


async def burn_mixed(args: argparse.Namespace, priorities: list[int] | None) -> float:
    """A burn-down of ``--tasks`` tasks submitted by ``submit_many`` (of ``priorities``;
    ``None``: the default, 0) by a store opened afresh, checked afterwards; tasks/s."""
    namespace = "prio_" + secrets.token_hex(3)
    target = _sql_target("postgresql", args.postgres_url, namespace, None)
    probe = Probe()
    try:
        store = await target.open()
        try:
            app = make_app(store, probe)
            await _submit_many(app, _items(args.tasks, priorities))
        finally:
            await target.close(store)
        store = await target.second(store)
        try:
            rate = await burn_down(make_app(store, probe), probe, args.tasks,
                                   args.concurrency, args.prefetch)
            await check(store, args.tasks)
            return rate
        finally:
            await target.close(store)
    finally:
        await drop_namespace(args.postgres_url, namespace)


async def priority_rounds(args: argparse.Namespace, peer: str) -> list[dict[str, float]]:
    """Each round: burn-downs without and with mixed priorities (which goes first
    alternates), then pgqueuer's of jobs of the same mixed priorities."""
    rng = random.Random(args.seed)
    mixed = [rng.choice(PRIORITIES) for _ in range(args.tasks)]
    rounds = []
    for n in range(args.rounds):
        plain, ranked = await in_turn(n, lambda: burn_mixed(args, None),
                                      lambda: burn_mixed(args, mixed))
        theirs, _ = await peers.pgqueuer_burn_down(peer, args.tasks, mixed)
        rounds.append({"plain": round(plain, 1), "mixed": round(ranked, 1),
                       "pgqueuer_mixed": round(theirs, 1),
                       "mixed/plain": round(ranked / plain, 3),
                       "mixed/pgqueuer": round(ranked / theirs, 3)})
    return rounds


def _multi_row(
    table: sa.Table, dialect: sa.Dialect, size: int
) -> tuple[str, list[tuple[int, int]]]:
    """``INSERT`` of ``size`` rows of ``table``'s columns in one statement, compiled for
    ``dialect``; the (row, column) of each positional parameter in order."""
    names = [c.name for c in table.columns]
    rows = [{name: sa.bindparam(f"p{i}_{k}") for k, name in enumerate(names)}
            for i in range(size)]
    compiled = sa.insert(table).values(rows).compile(dialect=dialect)
    spots = (name[1:].split("_") for name in compiled.positiontup or ())
    return str(compiled), [(int(row), int(column)) for row, column in spots]


async def bare_insert(url: str, rows: list[tuple[Any, ...]]) -> float:
    """Rows/s of multi-row ``INSERT`` statements of :data:`BATCH` ``rows`` each (the
    driver's values of every ``tasks`` column, in order), compiled once and run on the
    driver, one transaction each, into a fresh table of the ``tasks`` definition."""
    table = Tables.build("bare_" + secrets.token_hex(3) + "_").tasks
    engine = create_engine(parse_url(url), busy_timeout=30)
    statements: dict[int, tuple[str, list[tuple[int, int]]]] = {}
    try:
        async with engine.begin() as conn:
            await conn.run_sync(table.create)
        for first in range(0, len(rows), BATCH):
            size = min(BATCH, len(rows) - first)
            if size not in statements:
                statements[size] = _multi_row(table, engine.dialect, size)
        try:
            started = time.perf_counter()
            for first in range(0, len(rows), BATCH):
                batch = rows[first:first + BATCH]
                sql, order = statements[len(batch)]
                async with engine.begin() as conn:
                    await conn.exec_driver_sql(sql, tuple(batch[i][k] for i, k in order))
            return len(rows) / (time.perf_counter() - started)
        finally:
            async with engine.begin() as conn:
                await conn.run_sync(table.drop)
    finally:
        await engine.dispose()


async def _bulk_submit_rows(url: str, count: int) -> tuple[float, list[tuple[Any, ...]]]:
    """Tasks/s of ``submit_many`` into a fresh namespace, and the task rows it wrote (the
    driver's values, columns in the table's order)."""
    namespace = "sub_" + secrets.token_hex(3)
    async with _fresh(url, namespace) as app:
        rate = await _submit_many(app, _items(count))
        tasks = Tables.build(namespace + "_").tasks
        engine = create_engine(parse_url(url), busy_timeout=30)
        try:
            async with engine.connect() as conn:
                sql = str(sa.select(tasks).compile(dialect=engine.dialect))
                rows = [tuple(r) for r in await conn.exec_driver_sql(sql)]
        finally:
            await engine.dispose()
    return rate, rows


async def bulk_against_insert(url: str, count: int, rounds: int) -> list[dict[str, float]]:
    """``rounds`` of ``submit_many`` against the bare loop of the rows it wrote (the
    first round's rows; which goes first alternates, the first round's submit first)."""
    pairs = []
    rows: list[tuple[Any, ...]] = []

    async def submit() -> float:
        rate, written = await _bulk_submit_rows(url, count)
        rows[:] = rows or written  # the first round's rows, for every bare loop
        return rate

    for n in range(rounds):
        ours, bare = await in_turn(n, submit, lambda: bare_insert(url, rows))
        pairs.append({"submit_many": round(ours, 1), "bare_insert": round(bare, 1),
                      "ratio": round(ours / bare, 3)})
    return pairs


def _answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "localhost", parts.port or 3306), 2):
            return True
    except OSError:
        return False


async def run(args: argparse.Namespace, dsn: str | None, tmp: Path) -> dict[str, Any]:
    """Every figure of the module docstring; PostgreSQL's only with ``dsn`` and pgqueuer."""
    report: dict[str, Any] = {"serial": args.serial, "bulk": args.bulk, "rounds": args.rounds}
    if dsn is not None and peers.available():
        peer = peers.peer_dsn(dsn)
        url = args.postgres_url
        report["postgresql"] = {
            "serial": await _pairs(args.rounds, lambda: ours_serial(url, args.serial),
                                   lambda: peers.pgqueuer_enqueue(peer, args.serial, batch=1)),
            "bulk": await _pairs(args.rounds, lambda: ours_bulk(url, args.bulk),
                                 lambda: peers.pgqueuer_enqueue(peer, args.bulk, batch=BATCH)),
            "priorities": await priority_rounds(args, peer),
            "processes": await submit_processes.run(url, peer, args.processes, args.serial,
                                                    args.rounds),
        }
    if peers.huey_available():
        files = itertools.count()

        async def huey() -> float:
            return peers.huey_enqueue(f"{tmp}/huey{next(files)}.db", args.serial)

        report["sqlite_serial"] = await _pairs(
            args.rounds, lambda: ours_serial(f"sqlite:///{tmp}/serial{next(files)}.db",
                                             args.serial), huey, peer="huey")
    else:
        report["sqlite_serial"] = "skipped: huey is not installed"
    lite = f"sqlite:///{tmp}/submits.db"
    report["sqlite"] = await bulk_against_insert(lite, args.bulk, args.rounds)
    if _answers(args.mariadb_url):
        report["mariadb"] = await bulk_against_insert(args.mariadb_url, args.bulk,
                                                      args.rounds)
    else:
        report["mariadb"] = f"skipped: nothing answers at {args.mariadb_url}"
    return report


def _line(name: str, pairs: list[dict[str, float]], ours: str, theirs: str, ratio: str,
          target: float | None) -> str:
    ratios = [p[ratio] for p in pairs]
    median = statistics.median(ratios)
    verdict = "" if target is None else (
        f" (target >= {target:g}: {'met' if median >= target else 'NOT met'})")
    return (f"  {name:<29} {' '.join(f'{p[ours]:>7.0f}' for p in pairs)}  vs "
            f"{' '.join(f'{p[theirs]:>7.0f}' for p in pairs)}  ratios "
            f"{' '.join(f'{r:.2f}' for r in ratios)}  median {median:.2f}{verdict}")


def render(report: dict[str, Any]) -> list[str]:
    """The lines of the submit figures, each round's rate and the ratios' median."""
    lines = [f"submits (same run; serial {report['serial']}, bulk {report['bulk']} in "
             f"lists of {BATCH}; per round, ours vs the reference):"]
    pg = report.get("postgresql")
    if pg:
        lines.append(_line("submit / enqueue 1x1", pg["serial"], "ours", "pgqueuer",
                           "ratio", 1.0))
        lines.append(_line("submit_many / enqueue 1000", pg["bulk"], "ours", "pgqueuer",
                           "ratio", 1.0))
        for processes, pairs in pg.get("processes", {}).items():
            lines.append(_line(f"submit / enqueue, {processes} processes", pairs, "ours",
                               "pgqueuer", "ratio", None))
        prio = pg["priorities"]
        lines.append(_line("burn-down mixed / plain", prio, "mixed", "plain",
                           "mixed/plain", 0.95))
        lines.append(_line("mixed / pgqueuer mixed", prio, "mixed", "pgqueuer_mixed",
                           "mixed/pgqueuer", 1.0))
    else:
        lines.append("  postgresql: not measured (no PostgreSQL or no pgqueuer)")
    serial = report.get("sqlite_serial", "not measured")
    if isinstance(serial, str):
        lines.append(f"  sqlite submit / huey enqueue: {serial}")
    else:
        lines.append(_line("sqlite submit / huey 1x1", serial, "ours", "huey", "ratio", 1.0))
    for name in ("sqlite", "mariadb"):
        pairs = report[name]
        if isinstance(pairs, str):
            lines.append(f"  {name}: {pairs}")
        else:
            lines.append(_line(f"{name} submit_many / INSERT", pairs, "submit_many",
                               "bare_insert", "ratio", None))
    return lines
