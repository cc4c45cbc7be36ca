"""A finished task's cost at rest on PostgreSQL — database bytes and WAL per task — beside
pgqueuer's, measured in the same run (run alone, or by ``bench.py``).

Ours: a fresh namespace; ``--tasks`` no-op tasks submitted by ``app.submit_many`` in lists
of 1000, burnt down by one worker (``--concurrency``, prefetch auto), the store closed;
then the size of the namespace's tables with their indexes and TOAST
(``pg_total_relation_size``) over the tasks, and the WAL the server wrote from before the
schema was made to after the last outcome (``pg_current_wal_lsn``) over the tasks.
pgqueuer: the same in its own database (``peers.peer_dsn``) — jobs enqueued in lists of
1000 and drained by one ``QueueManager``, its tables (every table of that database's
``public`` schema) measured before they are removed. The WAL figure is the whole server's:
run it on a server nothing else writes to, or read it as an upper bound. Nothing is
vacuumed in between: the figures are what a burn-down leaves, dead row versions included.

    python packages/store-sql/bench/footprint.py --tasks 20000 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import asyncpg
import bench
import peers
from tasks_core import SubmitItem
from tasks_store_sql._schema import Tables, prefix_of
from tasks_store_sql.plugin import drop_namespace

__all__ = ["render", "run"]

BATCH = 1000
_SIZE_OF = ("SELECT coalesce(sum(pg_total_relation_size(to_regclass(n))), 0) "
            "FROM unnest($1::text[]) n")
_PUBLIC_SIZE = """SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'public' AND c.relkind = 'r'"""
_WAL_AT = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"
"""Where the server's WAL is now, in bytes from its start."""


async def _wal_at(dsn: str) -> float:
    conn = await asyncpg.connect(dsn)
    try:
        return float(await conn.fetchval(_WAL_AT))
    finally:
        await conn.close()


async def ours(args: argparse.Namespace, dsn: str) -> dict[str, float]:
    """Bytes and WAL per finished task of ours (module docstring)."""
    namespace = "foot_" + secrets.token_hex(3)
    target = bench._sql_target("postgresql", args.postgres_url, namespace, None)
    probe = bench.Probe()
    start = await _wal_at(dsn)
    try:
        store = await target.open()
        try:
            app = bench.make_app(store, probe)
            items = [SubmitItem(task="noop") for _ in range(args.tasks)]
            for first in range(0, len(items), BATCH):
                await app.submit_many(items[first:first + BATCH], bench.OWNER)
            await bench.burn_down(app, probe, args.tasks, args.concurrency, "auto")
            await bench.check(store, args.tasks)
        finally:
            await target.close(store)
        conn = await asyncpg.connect(dsn)
        try:
            wal = float(await conn.fetchval(_WAL_AT)) - start
            names = Tables.build(prefix_of(namespace)).names
            size = float(await conn.fetchval(_SIZE_OF, names))
        finally:
            await conn.close()
    finally:
        await drop_namespace(args.postgres_url, namespace)
    return {"bytes": round(size / args.tasks), "wal": round(wal / args.tasks)}


async def pgqueuer(args: argparse.Namespace, dsn: str) -> dict[str, float]:
    """Bytes and WAL per finished job of pgqueuer (module docstring)."""
    peer = peers.peer_dsn(dsn)
    start = await _wal_at(peer)
    measured: dict[str, float] = {}

    async def measure(conn: Any) -> None:
        measured["wal"] = float(await conn.fetchval(_WAL_AT)) - start
        measured["bytes"] = float(await conn.fetchval(_PUBLIC_SIZE))

    await peers.pgqueuer_burn_down(peer, args.tasks, before_uninstall=measure)
    return {key: round(value / args.tasks) for key, value in measured.items()}


async def run(args: argparse.Namespace, dsn: str) -> list[dict[str, float]]:
    """``--rounds`` pairs, which goes first alternating: each side's bytes and WAL per
    task and their ratios (ours / pgqueuer's)."""
    await bench._ensure_database(peers.peer_dsn(dsn))
    rounds = []
    for n in range(args.rounds):
        mine, theirs = await bench.in_turn(n, lambda: ours(args, dsn),
                                           lambda: pgqueuer(args, dsn))
        rounds.append({"bytes": mine["bytes"], "wal": mine["wal"],
                       "pgqueuer_bytes": theirs["bytes"], "pgqueuer_wal": theirs["wal"],
                       "bytes_ratio": round(mine["bytes"] / theirs["bytes"], 2),
                       "wal_ratio": round(mine["wal"] / theirs["wal"], 2)})
    return rounds


def render(rounds: list[dict[str, float]], target: float = 1.5) -> list[str]:
    """The lines of the footprint figures, per round and the ratios' medians."""
    lines = ["footprint per finished task on PostgreSQL (ours vs pgqueuer, same run):"]
    for key, name in (("bytes", "database bytes"), ("wal", "WAL bytes")):
        ratios = [r[f"{key}_ratio"] for r in rounds]
        median = statistics.median(ratios)
        peer = [r["pgqueuer_" + key] for r in rounds]
        lines.append(
            f"  {name:<15} {' '.join(f'{r[key]:>6.0f}' for r in rounds)}  vs "
            f"{' '.join(f'{x:>6.0f}' for x in peer)}  ratios "
            f"{' '.join(f'{x:.2f}' for x in ratios)}  median {median:.2f} (target <= "
            f"{target:g}: {'met' if median <= target else 'NOT met'})")
    return lines


def main() -> None:
    """Parse arguments, run, print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--postgres-url", default=bench.POSTGRES_URL)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    dsn = bench._dsn(args)

    async def both() -> list[dict[str, float]]:
        await bench._ensure_database(dsn)
        return await run(args, dsn)

    print("\n".join(render(asyncio.run(both()))))


if __name__ == "__main__":
    main()
