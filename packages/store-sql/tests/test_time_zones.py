"""Database time in a non-UTC session: retries, leases and TTLs stay exact."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from tasks_core import (
    Deferred,
    NewTask,
    Owner,
    RetryPolicy,
    RetryRequested,
    TaskQuery,
    TaskStatus,
    Work,
)
from tasks_store_sql import SQLStore

pytestmark = pytest.mark.anyio

ZONE = "Asia/Kathmandu"  # UTC+05:45: no whole-hour mistake can hide
OFFSET = "+05:45"
SLACK = timedelta(seconds=10)


def _session_options(url: str) -> dict[str, Any]:
    if url.startswith("postgresql"):
        return {"connect_args": {"server_settings": {"timezone": ZONE}}}
    if url.startswith("mysql"):
        return {"connect_args": {"init_command": f"SET time_zone = '{OFFSET}'"}}
    return {}


async def _session_zone(store: SQLStore) -> str:
    query = {
        "postgresql": "SHOW timezone",
        "mysql": "SELECT @@session.time_zone",
        "sqlite": "SELECT strftime('%H:%M', 'now', 'localtime') <> strftime('%H:%M', 'now')",
    }[store.dialect]
    async with store.engine.connect() as conn:
        return str((await conn.execute(sa.text(query))).scalar())


@pytest.fixture
def local_zone(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The process runs in a non-UTC zone too (SQLite's ``localtime``)."""
    monkeypatch.setenv("TZ", ZONE)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


async def test_database_time_in_a_non_utc_session_keeps_instants_exact(
    db_url: str, fresh_namespace: str, local_zone: Any
) -> None:
    """With the session (and process) in UTC+05:45 and the database's own clock, the
    store's instants MUST be true UTC, and TTLs, leases and retry deadlines MUST be
    exactly as long as asked — in the snapshot and in every query that uses them.

    Troubleshooting: read the clock as UTC (``clock_timestamp()`` is absolute,
    ``UTC_TIMESTAMP()`` not ``NOW()``, SQLite ``'now'`` is UTC) and store instants in a
    zone-free form (``timestamptz``, or naive UTC in ``DATETIME``).
    """
    store = await SQLStore.open(
        db_url, namespace=fresh_namespace, engine_options=_session_options(db_url)
    )
    try:
        assert await _session_zone(store) in (ZONE, OFFSET, "1")
        assert abs(await store.now() - datetime.now(UTC)) < SLACK
        created = await store.create(
            NewTask(
                id="t",
                tenant="default",
                owner=Owner("alice"),
                work=Work(name="j", retry_policy=RetryPolicy.fixed(3600, attempts=2)),
                ttl_s=7200,
            )
        )
        assert abs(created.created_at - datetime.now(UTC)) < SLACK
        assert timedelta(hours=2) == created.expires_at - created.created_at  # type: ignore[operator]
        held = await store.claim("t", "w1", 600)
        assert timedelta(seconds=600) == held.lease.expires_at - held.snapshot.started_at  # type: ignore[operator]
        running = await store.list(TaskQuery(tenant=None, statuses=frozenset({TaskStatus.RUNNING})))
        assert ["t"] == [s.id for s in running]
        retried = await store.transition(
            "t", 0, RetryRequested(event_id="r", error="Boom"), held.lease
        )
        assert retried.record is not None
        assert timedelta(hours=1) == retried.snapshot.retry_at - retried.record.committed_at  # type: ignore[operator]
        assert [] == await store.claim_next("w2", 600, queues=["default"])
        with pytest.raises(Deferred) as deferred:
            await store.claim("t", "w2", 600)
        assert 3500 < deferred.value.seconds <= 3600
        assert [] == await store.reap()
        assert retried.snapshot == await store.get("t", tenant=None)
    finally:
        await store.aclose()
