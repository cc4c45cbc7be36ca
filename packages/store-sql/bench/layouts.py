"""What a finished task would cost at rest under other row layouts: a what-if on
PostgreSQL, in plain SQL, before the store is rebuilt (issue 37, item 2).

Each layout gets its own tables (``lt_…`` in the bench database), then the write pattern
of a burn-down by ``--workers`` connections: ``--tasks`` no-op tasks inserted 1000 to a
transaction; each worker claims 32 at a time (``FOR UPDATE SKIP LOCKED``, claim order)
and completes them one statement each, one transaction per 32. Printed per task: the
tables' size with indexes (``pg_total_relation_size``) and the WAL the server wrote
(whole server: run it alone). Nothing is vacuumed, as in ``footprint.py``.

Layouts (the stored text is what the store writes for a no-op task today):

- ``today``: the store's row, its snapshot text rewritten by the claim and the
  completion, one ``task_events`` row and one ``task_members`` row per task.
- ``columns``: the keys a claim or a completion writes as typed columns; the text holds
  the rest, written once. History and members as today.
- ``lean``: ``columns``, with the owner a column (and an index) instead of a member row,
  and the completion's event id in the row instead of a ``task_events`` row.
- ``split``: ``lean``'s columns in a narrow row of their own; the text and the owner in a
  row written once (a read joins the two).

    python packages/store-sql/bench/layouts.py --tasks 10000 --workers 1 4
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
from typing import Any

import asyncpg

__all__ = ["LAYOUTS", "run"]

DSN = "postgresql://postgres@127.0.0.1:5432/tasks_bench"
_INDEXES = [
    "CREATE INDEX lt_ix_counts ON lt_tasks (tenant, queue, status)",
    "CREATE INDEX lt_ix_claim ON lt_tasks (queue, status, neg_priority, available_at, id) "
    "WHERE status = 'pending' AND claim_expires_at IS NULL",
    "CREATE INDEX lt_ix_waiting ON lt_tasks (queue, available_at) WHERE status = 'pending' "
    "AND claim_expires_at IS NULL AND (retry_at IS NOT NULL OR run_at IS NOT NULL)",
    "CREATE INDEX lt_ix_lease ON lt_tasks (queue, claim_expires_at) "
    "WHERE claim_expires_at IS NOT NULL",
    "CREATE INDEX lt_ix_expires ON lt_tasks (expires_at, id) WHERE expires_at IS NOT NULL",
    "CREATE INDEX lt_ix_active ON lt_tasks (tenant, status, expires_at) "
    "WHERE status IN ('pending', 'waiting_input')",
    "CREATE INDEX lt_ix_status ON lt_tasks (status, id) "
    "WHERE status IN ('waiting_input', 'failed', 'cancelled')",
]
"""The store's partial indexes, on the row a claim and a completion write."""
_HISTORY = [
    "CREATE TABLE lt_events (task_id varchar(1024), event_id varchar(256), revision int "
    "NOT NULL, kind varchar(32) NOT NULL, committed_at timestamptz NOT NULL, record text "
    "NOT NULL, PRIMARY KEY (task_id, event_id), UNIQUE (task_id, revision))",
    "CREATE TABLE lt_members (tenant varchar(256), user_id varchar(256), task_id "
    "varchar(1024), role varchar(8) NOT NULL, PRIMARY KEY (tenant, user_id, task_id))",
    "CREATE INDEX lt_ix_members_task ON lt_members (task_id)",
]
_TENANT = "CREATE INDEX lt_ix_tenant ON lt_tasks (tenant, id)"
_OWNER = "CREATE INDEX lt_ix_owner ON lt_tasks (tenant, owner, id)"
_TODAY = """CREATE TABLE lt_tasks (id varchar(1024) PRIMARY KEY, tenant varchar(256) NOT NULL,
 queue varchar(256) NOT NULL, run_id varchar(64) NOT NULL, created_at timestamptz NOT NULL,
 status varchar(16) NOT NULL, revision int NOT NULL, row_version int NOT NULL,
 claim_token varchar(256), claim_generation int, claim_expires_at timestamptz,
 retry_at timestamptz, run_at timestamptz, available_at timestamptz NOT NULL,
 neg_priority smallint NOT NULL DEFAULT 0, updated_at timestamptz NOT NULL,
 expires_at timestamptz, max_deliveries int, snapshot text NOT NULL)"""
_COLUMNS = """CREATE TABLE lt_tasks (id varchar(1024) PRIMARY KEY, tenant varchar(256) NOT NULL,
 queue varchar(256) NOT NULL, run_id varchar(64) NOT NULL, created_at timestamptz NOT NULL,
 status varchar(16) NOT NULL, revision int NOT NULL, row_version int NOT NULL,
 claim_token varchar(256), claim_generation int, claim_expires_at timestamptz,
 retry_at timestamptz, run_at timestamptz, available_at timestamptz NOT NULL,
 neg_priority smallint NOT NULL DEFAULT 0, updated_at timestamptz NOT NULL,
 expires_at timestamptz, max_deliveries int, deliveries int NOT NULL,
 lease_generation int NOT NULL, claim_worker varchar(256), claim_until timestamptz,
 claim_flags smallint, started_at timestamptz, finished_at timestamptz, progress text,
 result text, error text, cancel_reason text, input_requests text, body text NOT NULL)"""
_LEAN = """CREATE TABLE lt_tasks (id varchar(1024) PRIMARY KEY, tenant varchar(256) NOT NULL,
 queue varchar(256) NOT NULL, run_id varchar(64) NOT NULL, created_at timestamptz NOT NULL,
 owner varchar(256) NOT NULL, status varchar(16) NOT NULL, revision int NOT NULL,
 row_version int NOT NULL, claim_token varchar(256), claim_generation int,
 claim_expires_at timestamptz, retry_at timestamptz, run_at timestamptz,
 available_at timestamptz NOT NULL, neg_priority smallint NOT NULL DEFAULT 0,
 updated_at timestamptz NOT NULL, expires_at timestamptz, max_deliveries int,
 deliveries int NOT NULL, lease_generation int NOT NULL, claim_worker varchar(256),
 claim_until timestamptz, claim_flags smallint, started_at timestamptz,
 finished_at timestamptz, progress text, result text, error text, cancel_reason text,
 input_requests text, last_event varchar(256), body text NOT NULL)"""
_SPLIT = [
    """CREATE TABLE lt_docs (id varchar(1024) PRIMARY KEY, tenant varchar(256) NOT NULL,
 queue varchar(256) NOT NULL, run_id varchar(64) NOT NULL, created_at timestamptz NOT NULL,
 owner varchar(256) NOT NULL, body text NOT NULL)""",
    "CREATE INDEX lt_ix_tenant ON lt_docs (tenant, id)",
    "CREATE INDEX lt_ix_owner ON lt_docs (tenant, owner, id)",
    """CREATE TABLE lt_tasks (id varchar(1024) PRIMARY KEY, tenant varchar(256) NOT NULL,
 queue varchar(256) NOT NULL, status varchar(16) NOT NULL, revision int NOT NULL,
 row_version int NOT NULL, claim_token varchar(256), claim_generation int,
 claim_expires_at timestamptz, retry_at timestamptz, run_at timestamptz,
 available_at timestamptz NOT NULL, neg_priority smallint NOT NULL DEFAULT 0,
 updated_at timestamptz NOT NULL, expires_at timestamptz, max_deliveries int,
 deliveries int NOT NULL, lease_generation int NOT NULL, claim_worker varchar(256),
 claim_until timestamptz, claim_flags smallint, started_at timestamptz,
 finished_at timestamptz, progress text, result text, error text, cancel_reason text,
 input_requests text, last_event varchar(256))""",
]
LAYOUTS: dict[str, list[str]] = {
    "today": [_TODAY, _TENANT, *_INDEXES, *_HISTORY],
    "columns": [_COLUMNS, _TENANT, *_INDEXES, *_HISTORY],
    "lean": [_LEAN, _TENANT, _OWNER, *_INDEXES],
    "split": [*_SPLIT, *_INDEXES],
}
"""Each layout's tables (see the module docstring)."""

_AT = '"2026-12-05T10:57:07.258000Z"'
_FRESH_HEAD = ('{"status":"pending","revision":0,"progress":null,"result":null,"error":null,'
               '"cancel_reason":null,"retry_at":null,"deliveries":0,"input_requests":{},'
               f'"claim":null,"lease_generation":0,"updated_at":{_AT},"started_at":null,'
               '"finished_at":null,"expires_at":null,')
_CLAIM = f'{{"worker_id":"vm:5289:938d87","generation":1,"expires_at":{_AT},"ended":%s,' \
         '"recovered":false}'
_CLAIMED_HEAD = ('{"status":"pending","revision":0,"progress":null,"result":null,'
                 '"error":null,"cancel_reason":null,"retry_at":null,"deliveries":1,'
                 f'"input_requests":{{}},"claim":{_CLAIM % "false"},"lease_generation":1,'
                 f'"updated_at":{_AT},"started_at":{_AT},"finished_at":null,'
                 '"expires_at":null,')
_DONE_HEAD = ('{"status":"completed","revision":1,"progress":null,"result":null,'
              '"error":null,"cancel_reason":null,"retry_at":null,"deliveries":1,'
              f'"input_requests":{{}},"claim":{_CLAIM % "true"},"lease_generation":1,'
              f'"updated_at":{_AT},"started_at":{_AT},"finished_at":{_AT},'
              f'"expires_at":{_AT},')
_RECORD = ('{"event":{"event_id":"%s","kind":"completed","result":null},"revision":1,'
           f'"committed_at":{_AT},"status":"completed","retry_at":null,"error":null,'
           '"accepted":null}')


def _body(task_id: str, run_id: str) -> str:
    return (f'"id":"{task_id}","tenant":"default","owner":{{"user_id":"bench"}},'
            f'"work":{{"name":"noop"}},"run_id":"{run_id}","retention_s":604800.0,'
            f'"created_at":{_AT}}}')


_NEW_TASKS = {
    "today": "INSERT INTO lt_tasks (id, tenant, queue, run_id, created_at, status, revision, "
             "row_version, available_at, updated_at, max_deliveries, snapshot) VALUES ($1, "
             "'default', 'default', $2, now(), 'pending', 0, 0, now(), now(), 25, $3)",
    "columns": "INSERT INTO lt_tasks (id, tenant, queue, run_id, created_at, status, "
               "revision, row_version, available_at, updated_at, max_deliveries, "
               "deliveries, lease_generation, body) VALUES ($1, 'default', 'default', $2, "
               "now(), 'pending', 0, 0, now(), now(), 25, 0, 0, $3)",
    "lean": "INSERT INTO lt_tasks (id, tenant, queue, run_id, created_at, status, revision, "
            "row_version, available_at, updated_at, max_deliveries, deliveries, "
            "lease_generation, body, owner) VALUES ($1, 'default', 'default', $2, now(), "
            "'pending', 0, 0, now(), now(), 25, 0, 0, $3, 'bench')",
    "split": "INSERT INTO lt_docs VALUES ($1, 'default', 'default', $2, now(), 'bench', $3)",
}
"""Each layout's insert of a new task ``($1 id, $2 run id, $3 text)``."""
_NEW_STATE = ("INSERT INTO lt_tasks (id, tenant, queue, status, revision, row_version, "
              "available_at, updated_at, max_deliveries, deliveries, lease_generation) "
              "VALUES ($1, 'default', 'default', 'pending', 0, 0, now(), now(), 25, 0, 0)")
_NEW_MEMBER = "INSERT INTO lt_members VALUES ('default', 'bench', $1, 'owner')"
_NEW_EVENT = "INSERT INTO lt_events VALUES ($1, $2, 1, 'completed', now(), $3)"
_CLAIM_TEXT = (
    "UPDATE lt_tasks SET claim_token = $1, claim_generation = 1, claim_expires_at = now() + "
    "interval '30 s', row_version = row_version + 1, updated_at = now(), snapshot = $2 || "
    "substr(snapshot, strpos(snapshot, ',\"id\":\"') + 1) WHERE id IN (SELECT id FROM "
    "lt_tasks WHERE queue = 'default' AND status = 'pending' AND claim_expires_at IS NULL "
    "AND available_at <= now() ORDER BY neg_priority, available_at, id LIMIT 32 FOR UPDATE "
    "SKIP LOCKED) RETURNING id")
_CLAIM_COLUMNS = (
    "UPDATE lt_tasks SET claim_token = $1, claim_generation = 1, claim_expires_at = now() + "
    "interval '30 s', row_version = row_version + 1, updated_at = now(), claim_worker = "
    "'vm:5289:938d87', claim_until = now() + interval '30 s', claim_flags = 0, started_at = "
    "now(), deliveries = 1, lease_generation = 1 WHERE id IN (SELECT id FROM lt_tasks WHERE "
    "queue = 'default' AND status = 'pending' AND claim_expires_at IS NULL AND available_at "
    "<= now() ORDER BY neg_priority, available_at, id LIMIT 32 FOR UPDATE SKIP LOCKED) "
    "RETURNING id")
_END_TEXT = (
    "UPDATE lt_tasks SET status = 'completed', revision = 1, claim_token = NULL, "
    "claim_expires_at = NULL, row_version = row_version + 1, updated_at = now(), expires_at "
    "= now() + interval '7 days', snapshot = $2 || substr(snapshot, strpos(snapshot, "
    "',\"id\":\"') + 1) WHERE id = $1")
_END_COLUMNS = (
    "UPDATE lt_tasks SET status = 'completed', revision = 1, claim_token = NULL, "
    "claim_expires_at = NULL, row_version = row_version + 1, updated_at = now(), expires_at "
    "= now() + interval '7 days', claim_flags = 1, finished_at = now() WHERE id = $1")
_END_IN_ROW = (
    "UPDATE lt_tasks SET status = 'completed', revision = 1, claim_token = NULL, "
    "claim_expires_at = NULL, row_version = row_version + 1, updated_at = now(), expires_at "
    "= now() + interval '7 days', claim_flags = 1, finished_at = now(), last_event = $2 "
    "WHERE id = $1")


async def _create(conn: Any, layout: str, chunk: list[tuple[str, str]]) -> None:
    """Insert new tasks ``(id, run_id)`` as ``layout`` stores them."""
    head = _FRESH_HEAD if layout == "today" else "{"
    await conn.executemany(_NEW_TASKS[layout], [(i, r, head + _body(i, r)) for i, r in chunk])
    if layout == "split":
        await conn.executemany(_NEW_STATE, [(i,) for i, _ in chunk])
    if layout in ("today", "columns"):
        await conn.executemany(_NEW_MEMBER, [(i,) for i, _ in chunk])


async def _burn(conn: Any, layout: str, run_ids: dict[str, str], left: list[int]) -> None:
    """Claim and complete tasks until none is left (``left[0]`` counts them down)."""
    text = layout == "today"
    while left[0] > 0:
        async with conn.transaction():
            claimed = [row[0] for row in await (
                conn.fetch(_CLAIM_TEXT, secrets.token_hex(16), _CLAIMED_HEAD) if text
                else conn.fetch(_CLAIM_COLUMNS, secrets.token_hex(16)))]
        if not claimed:
            await asyncio.sleep(0.001)  # another worker holds the last ones
            continue
        async with conn.transaction():
            for task_id in claimed:
                event_id = run_ids[task_id] + ":1:completed"
                if layout in ("lean", "split"):
                    await conn.execute(_END_IN_ROW, task_id, event_id)
                    continue
                if text:
                    await conn.execute(_END_TEXT, task_id, _DONE_HEAD)
                else:
                    await conn.execute(_END_COLUMNS, task_id)
                await conn.execute(_NEW_EVENT, task_id, event_id, _RECORD % event_id)
        left[0] -= len(claimed)


async def run(dsn: str, layout: str, tasks: int, workers: int) -> tuple[int, int]:
    """Bytes and WAL per finished task of ``layout`` (module docstring)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("DROP TABLE IF EXISTS lt_tasks, lt_docs, lt_events, lt_members")
        for statement in LAYOUTS[layout]:
            await conn.execute(statement)
        await conn.execute("CHECKPOINT")  # no checkpoint's page images in one run only
        wal_at = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"
        start = await conn.fetchval(wal_at)
        run_ids = {"::" + secrets.token_hex(16): secrets.token_hex(8) for _ in range(tasks)}
        pairs = list(run_ids.items())
        for first in range(0, tasks, 1000):
            async with conn.transaction():
                await _create(conn, layout, pairs[first:first + 1000])
        left = [tasks]
        connections = [await asyncpg.connect(dsn) for _ in range(workers)]
        try:
            await asyncio.gather(*(_burn(c, layout, run_ids, left) for c in connections))
        finally:
            for c in connections:
                await c.close()
        wal = await conn.fetchval(wal_at) - start
        size = await conn.fetchval(
            "SELECT sum(pg_total_relation_size(oid)) FROM pg_class WHERE relkind = 'r' "
            "AND relname = ANY($1::text[])", ["lt_tasks", "lt_docs", "lt_events", "lt_members"])
        await conn.execute("DROP TABLE IF EXISTS lt_tasks, lt_docs, lt_events, lt_members")
        return round(size / tasks), round(wal / tasks)
    finally:
        await conn.close()


def main() -> None:
    """Parse arguments, run each layout at each number of workers, print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dsn", default=DSN)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    args = parser.parse_args()
    for workers in args.workers:
        for layout in args.layouts:
            size, wal = asyncio.run(run(args.dsn, layout, args.tasks, workers))
            print(f"{layout:<8} workers {workers}: {size:>5} bytes, {wal:>5} WAL bytes per task")


if __name__ == "__main__":
    main()
