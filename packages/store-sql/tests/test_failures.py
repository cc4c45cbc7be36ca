"""Failures: a killed backend, a busy SQLite file, an unreachable server, a broken
schema. Driver errors never escape; nothing is half-written; the store recovers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import sqlalchemy.ext.asyncio
import sqlalchemy.pool
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import make_url
from tasks_core import (
    Failed,
    ManualClock,
    NewTask,
    Owner,
    StoreError,
    StoreUnavailable,
    TaskQuery,
    Work,
)
from tasks_store_sql import SQLStore

pytestmark = pytest.mark.anyio

ALICE = Owner("alice")


def _new(task_id: str) -> NewTask:
    return NewTask(id=task_id, tenant="default", owner=ALICE, work=Work(name="job"))


@pytest.fixture(params=["postgres", "mariadb"])
def server_url(request: pytest.FixtureRequest) -> str:
    """Each server database."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


_WAITING = {
    # (the store's write names task_events past the 1 kB of query text PostgreSQL keeps:
    # match the namespace of its tables instead)
    "postgresql": (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND query LIKE '%%killed\\_%%' "
        "AND pid <> pg_backend_pid() AND pid <> :blocker"
    ),
    # (not innodb_trx: MariaDB caches it while it is read more often than every 0.1 s)
    "mysql": (
        "SELECT id FROM information_schema.processlist WHERE command = 'Query' "
        "AND info LIKE 'INSERT INTO %%task_events%%' AND id <> connection_id() "
        "AND id <> :blocker"
    ),
}
_SESSION_ID = {"postgresql": "SELECT pg_backend_pid()", "mysql": "SELECT connection_id()"}
_KILL = {"postgresql": "SELECT pg_terminate_backend(:pid)", "mysql": "KILL CONNECTION :pid"}


async def test_a_backend_killed_mid_transaction_writes_nothing_and_the_store_recovers(
    server_url: str,
) -> None:
    """When the database kills the store's connection in the middle of a transaction
    (after the task row was updated, before the event was recorded), the call MUST raise
    ``StoreUnavailable``, nothing of it MUST be visible, and the next call MUST succeed.

    Troubleshooting: one transaction per operation, no autocommit between its
    statements; translate connection loss to ``StoreUnavailable``; let the pool drop the
    dead connection instead of handing it out again.
    """
    store = await SQLStore.open(server_url, namespace="killed", clock=ManualClock(),
                                schema="upgrade")  # a namespace kept from earlier runs
    events = store.tables.events
    try:
        async with store.engine.begin() as conn:
            for table in (events, store.tables.members, store.tables.tasks):
                await conn.execute(sa.delete(table))
            await conn.execute(sa.update(store.tables.locks).values(value=0))
        await store.create(_new("t"))
        held = await store.claim("t", "w1", 30)
        # (a failure: its record is a history row, where a completion's is the task's)
        done = Failed(event_id="done", error="Boom")
        async with store.engine.connect() as blocker, store.engine.connect() as monitor:
            trans = await blocker.begin()
            # (never the blocker itself: only the store's waiting session may be killed)
            blocker_id = await blocker.scalar(sa.text(_SESSION_ID[store.dialect]))
            # An uncommitted row with the same key makes the store's event insert wait.
            await blocker.execute(
                sa.insert(events).values(
                    task_id="t", event_id="done", revision=99, kind="failed",
                    committed_at=held.lease.expires_at, record="{}",
                )
            )
            writer = asyncio.ensure_future(store.transition("t", 0, done, held.lease))
            victim = None
            for _ in range(500):
                async with monitor.begin():  # statistics are a snapshot per transaction
                    found = await monitor.execute(sa.text(_WAITING[store.dialect]),
                                                  {"blocker": blocker_id})
                    victim = found.scalar()
                if victim is not None or writer.done():
                    break
                await asyncio.sleep(0.01)
            assert victim is not None, "the store's transaction never waited on the lock"
            async with monitor.begin():
                await monitor.execute(sa.text(_KILL[store.dialect]), {"pid": int(victim)})
            with pytest.raises(StoreUnavailable):
                await writer
            await trans.rollback()
        assert 0 == (await store.get("t", tenant=None)).revision
        assert [] == await store.history("t", tenant=None)
        applied = await store.transition("t", 0, done, held.lease)
        assert ("applied", 1) == (applied.outcome, applied.snapshot.revision)
    finally:
        await store.aclose()


@pytest.fixture(params=["asyncpg", "psycopg", "asyncmy", "aiomysql"])
def driver_url(request: pytest.FixtureRequest) -> str:
    """Each server database by each driver of it."""
    server = "mariadb" if request.param in ("asyncmy", "aiomysql") else "postgres"
    url = make_url(request.getfixturevalue(f"{server}_url"))
    return url.set(drivername=f"{url.get_backend_name()}+{request.param}").render_as_string(
        False)


async def test_a_connection_lost_while_idle_is_unavailable_in_plain_words(
    driver_url: str,
) -> None:
    """A pooled connection the server ended while it was idle (a restart, a failover, an
    operator's kill) MUST make the next call raise ``StoreUnavailable`` saying "the
    connection to the server was lost" — not only ``InternalClientError`` or
    ``OperationalError [2006]`` — and the call after it MUST succeed.

    Troubleshooting: ``_lost`` in ``_errors.py`` (an invalidated connection, SQLSTATE
    class 08 and 57P01–57P03, MariaDB's errnos 2006/2013/2055).
    """
    store = await SQLStore.open(driver_url, namespace="lost", schema="upgrade")
    try:
        async with store.engine.connect() as conn:  # the pool's one connection
            session = await conn.scalar(sa.text(_SESSION_ID[store.dialect]))
        async with store.engine.connect() as same:
            assert session == await same.scalar(sa.text(_SESSION_ID[store.dialect]))
        killer = sa.ext.asyncio.create_async_engine(store.engine.url, poolclass=sa.pool.NullPool)
        try:
            async with killer.connect() as admin:
                await admin.execute(sa.text(_KILL[store.dialect]), {"pid": int(session)})
        finally:
            await killer.dispose()
        with pytest.raises(StoreUnavailable, match="the connection to the server was lost"):
            await store.list(TaskQuery(tenant=None))
        assert [] == await store.list(TaskQuery(tenant=None))
    finally:
        await store.aclose()


async def test_an_unreachable_server_raises_store_unavailable() -> None:
    """A server that refuses connections MUST surface as ``StoreUnavailable``, never as a
    driver or socket error."""
    for url in ("postgresql://postgres@127.0.0.1:1/x", "mysql://root@127.0.0.1:1/x"):
        with pytest.raises(StoreUnavailable):
            await SQLStore.open(url)


async def test_a_dropped_table_raises_a_store_error_not_a_driver_error(
    db_url: str, fresh_namespace: str
) -> None:
    """A database error that is not transient (a table dropped under the store) MUST be
    a ``StoreError`` whose message names the error class, never a driver exception."""
    store = await SQLStore.open(db_url, namespace=fresh_namespace)
    try:
        async with store.engine.begin() as conn:
            await conn.run_sync(store.tables.events.drop)
        await store.create(_new("t"))
        with pytest.raises(StoreError) as failed:
            await store.history("t", tenant=None)
        assert not isinstance(failed.value, StoreUnavailable)
        assert "tasks_core" == type(failed.value).__module__.split(".")[0]
    finally:
        await store.aclose()

async def test_a_dropped_column_is_a_store_error_not_an_outage(
    db_url: str, fresh_namespace: str
) -> None:
    """A statement the database refuses for a column that is not there (a schema changed
    under the store: MariaDB's migrations commit statement by statement) MUST be a
    ``StoreError`` that is not ``StoreUnavailable``: MariaDB's drivers raise
    ``OperationalError`` for such refusals too (unknown column 1054, a duplicate column
    1060), which read as an outage ("unavailable") that a retry would end.

    Troubleshooting: ``_is_transient`` in ``_errors.py`` judges MariaDB/MySQL errors by
    their number (``_TRANSIENT_ERRNOS``, client errors), not the driver's class.
    """
    store = await SQLStore.open(db_url, namespace=fresh_namespace)
    try:
        await store.create(_new("t"))
        async with store.engine.begin() as conn:
            await conn.run_sync(lambda sync: Operations(MigrationContext.configure(sync))
                                .drop_column(store.tables.events.name, "record"))
        with pytest.raises(StoreError) as failed:
            await store.history("t", tenant=None)
        assert not isinstance(failed.value, StoreUnavailable), failed.value
    finally:
        await store.aclose()


async def test_a_busy_sqlite_file_fails_fast_and_writes_nothing(tmp_path: Path) -> None:
    """While another process holds SQLite's write lock longer than ``busy_timeout``, a
    write MUST raise ``StoreUnavailable`` having written nothing — saying in plain words
    that another connection held the write lock, not only ``OperationalError
    [SQLITE_BUSY]`` — and succeed once the lock is free. Reads MUST NOT wait for the
    writer (WAL).

    Troubleshooting: WAL mode, ``BEGIN IMMEDIATE`` (take the write lock first, so no
    transaction has to be abandoned halfway), and a bounded busy timeout.
    """
    path = tmp_path / "busy.db"
    store = await SQLStore.open(f"sqlite:///{path}", busy_timeout=0.2)
    try:
        await store.create(_new("before"))
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreUnavailable, match="held the file's write lock"):
                await store.create(_new("refused"))
            assert ["before"] == [s.id for s in await store.list(TaskQuery(tenant=None))]
        finally:
            other.execute("ROLLBACK")
            other.close()
        await store.create(_new("after"))
        ids = [s.id for s in await store.list(TaskQuery(tenant=None))]
        assert ["after", "before"] == ids
    finally:
        await store.aclose()


async def test_a_sqlite_write_waits_in_short_tries_for_another_processs_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another connection holds SQLite's write lock (less than ``busy_timeout``), a
    write MUST keep trying — every few milliseconds, not in SQLite's busy handler, which
    sleeps up to 100 ms between tries — and go through once the lock is released.

    Troubleshooting: the store's connections run ``PRAGMA busy_timeout = 0`` and
    ``Database.when_free`` tries the transaction again after 0.5–4 ms pauses.
    """
    path = tmp_path / "held.db"
    store = await SQLStore.open(f"sqlite:///{path}", busy_timeout=30)
    tries = 0
    tried_often = asyncio.Event()
    when_free = store._db.when_free

    async def counted_tries(attempt: Callable[[], Awaitable[Any]]) -> Any:
        async def counted() -> Any:
            nonlocal tries
            tries += 1
            if tries == 5:
                tried_often.set()
            return await attempt()

        return await when_free(counted)

    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        monkeypatch.setattr(store._db, "when_free", counted_tries)
        creating = asyncio.ensure_future(store.create(_new("waited")))
        await asyncio.wait_for(tried_often.wait(), 5)  # five tries: far below SQLite's pace
        assert not creating.done()
        other.execute("COMMIT")
        created = await asyncio.wait_for(creating, 5)
        assert created == await store.get("waited", tenant=None)
    finally:
        other.close()
        await store.aclose()


def test_a_store_outlives_the_event_loop_that_opened_it(server_url: str) -> None:
    """A store opened under one ``asyncio.run`` and used under the next (as a sync
    facade may do) MUST keep working: connections of the finished loop are dropped, not
    reused."""
    async def open_empty() -> SQLStore:
        store = await SQLStore.open(server_url, namespace="loops", schema="upgrade")
        async with store.engine.begin() as conn:
            for table in (store.tables.events, store.tables.members, store.tables.tasks):
                await conn.execute(sa.delete(table))
            await conn.execute(sa.update(store.tables.locks).values(value=0))
        return store

    store = asyncio.run(open_empty())

    async def use(task_id: str) -> list[str]:
        await store.create(_new(task_id))
        return [s.id for s in await store.list(TaskQuery(tenant=None))]

    assert ["a"] == asyncio.run(use("a"))
    assert ["a", "b"] == asyncio.run(use("b"))
    asyncio.run(store.aclose())


async def test_a_wait_cancelled_while_its_wakeup_connection_opens_leaves_nothing_unread(
    postgres_url: str,
) -> None:
    """A ``wait_for_work`` cancelled at any point while it opens the LISTEN connection (a
    worker shutting down) MUST leave no future whose error nobody reads ("Future
    exception was never retrieved … unexpected connection_lost() call" at exit), and the
    store MUST still wait (adopting the connection) or close cleanly afterwards.

    Troubleshooting: asyncpg cancelled in the middle of ``connect`` leaves its TLS
    negotiation future unread; ``Listener._listen`` in ``_wakeups.py`` opens the
    connection in a task of its own behind ``asyncio.shield``, which the next wait
    adopts and ``close`` waits for and closes. The cancellation is swept over every
    point of the opening, one event-loop step at a time.
    """
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        for steps in range(40):
            store = await SQLStore.open(postgres_url, namespace="cancelled", schema="upgrade")
            try:
                waiting = asyncio.ensure_future(store.wait_for_work(["q"], 30))
                for _ in range(steps):
                    await asyncio.sleep(0)  # one loop step further into the opening
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiting
                if steps % 2:
                    assert await store.wait_for_work(["q"], 0) is False
            finally:
                await store.aclose()
            gc.collect()  # an unread future reports when it is collected
    finally:
        loop.set_exception_handler(previous)
    assert [] == [str(context.get("message")) for context in reported]


@pytest.mark.parametrize(("errno", "transient"), [
    (1054, False),  # an unknown column
    (1060, False),  # a duplicate column
    (1146, False),  # no such table
    (1205, True),   # a lock wait timed out
    (1213, True),   # a deadlock
    (2013, True),   # the connection lost during a query
    (0, True),      # the driver's own: a connection closed under it
])
def test_a_mariadb_error_is_transient_by_its_number(errno: int, transient: bool) -> None:
    """A MariaDB/MySQL error MUST be ``StoreUnavailable`` (transient) by its number, not by
    the class its driver gives it — both drivers raise ``OperationalError`` for server
    refusals they do not map — and a driver's own ``(0, '')`` (a connection closed under
    it) by its class, as before."""
    import asyncmy.errors  # type: ignore[import-untyped,unused-ignore]
    import pymysql  # type: ignore[import-untyped,unused-ignore]
    from tasks_store_sql._errors import translated

    for module in (pymysql.err, asyncmy.errors):
        kind = module.InterfaceError if errno == 0 else module.OperationalError
        assert transient == isinstance(translated(kind(errno, "")), StoreUnavailable), module
