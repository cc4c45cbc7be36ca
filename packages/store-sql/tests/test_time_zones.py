"""Database time in a non-UTC session: retries, leases and TTLs stay exact."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from tasks_core import (
    Deferred,
    ManualClock,
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


def _session_options(url: str, zone: str = ZONE) -> dict[str, Any]:
    if url.startswith("postgresql"):
        return {"connect_args": {"server_settings": {"timezone": zone}}}
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


async def test_leases_and_ttls_of_days_are_exact_across_a_daylight_saving_change(
    db_url: str, fresh_namespace: str
) -> None:
    """With the session in a zone that leaves daylight saving time during a lease and a
    TTL of days, a day MUST still be 24 hours: in the snapshot, and in the queries that
    decide when the lease lapses and when the task is reaped.

    Troubleshooting: PostgreSQL adds an interval's days as calendar days in the session's
    zone (``timestamptz + interval '1 day'`` is 25 hours on the night clocks go back);
    add a count of milliseconds (``postgres._statements.later``), never a ``timedelta``.
    """
    clock = ManualClock(datetime(2026, 10, 31, 16, 0, tzinfo=UTC))  # New York: EDT, then EST
    store = await SQLStore.open(
        db_url, namespace=fresh_namespace, clock=clock,
        engine_options=_session_options(db_url, zone="America/New_York"),
    )
    try:
        created = await store.create(NewTask(
            id="t", tenant="default", owner=Owner("alice"), work=Work(name="j"),
            ttl_s=2 * 86400,
        ))
        assert created.expires_at == created.created_at + timedelta(days=2)  # type: ignore[operator]
        [held] = await store.claim_next("w1", 86400, queues=["default"])
        assert held.lease.expires_at == clock.now() + timedelta(days=1)

        clock.advance(86400 - 0.001)
        assert [] == await store.claim_next("w2", 60, queues=["default"])  # still held
        clock.advance(0.001)
        [taken] = await store.claim_next("w2", 60, queues=["default"])  # lapsed: 24 h
        assert taken.lease.generation == held.lease.generation + 1

        clock.advance(86400 - 0.001)
        assert [] == await store.reap()
        clock.advance(0.002)
        assert ["t"] == await store.reap()  # expired: 48 h after it was created
    finally:
        await store.aclose()
