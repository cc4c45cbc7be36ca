"""Several processes opening one fresh namespace at once all succeed; the lock they share."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from tasks_core import TaskQuery
from tasks_core.errors import StoreUnavailable
from tasks_store_sql import SQLStore, _migrate
from tasks_store_sql._migrate import _lock_name
from tasks_store_sql._schema import Tables, prefix_of
from tasks_store_sql._url import parse_url
from tasks_store_sql.plugin import drop_namespace

pytestmark = pytest.mark.anyio

FIRST, LATER = 3, 5
"""Processes released together at first, and once the schema's first table exists."""
PROCESSES = FIRST + LATER

OPENER = textwrap.dedent(
    """
    import asyncio, sys
    from tasks_core import NewTask, Owner, Work
    from tasks_store_sql import SQLStore

    async def main(url, namespace, name):
        store = await SQLStore.open(url, namespace=namespace)
        try:
            await store.create(NewTask(id=name, tenant="default", owner=Owner("alice"),
                                       work=Work(name="job")))
        finally:
            await store.aclose()

    print("ready", flush=True)
    sys.stdin.readline()  # the barrier: started and imported, released by the test
    asyncio.run(main(*sys.argv[1:]))
    """
)


async def _release(procs: list[asyncio.subprocess.Process]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()


async def _first_table_exists(url: str, namespace: str) -> None:
    """Return once the namespace's tasks table is visible (bounded: 60 s)."""
    name = Tables.build(prefix_of(namespace)).tasks.name
    engine = create_async_engine(parse_url(url).url)
    try:
        async with asyncio.timeout(60):
            while True:
                async with engine.connect() as conn:
                    if await conn.run_sync(lambda c: sa.inspect(c).has_table(name)):
                        return
                await asyncio.sleep(0.002)  # a poll of the condition, not a stand-in
    finally:
        await engine.dispose()


@pytest.fixture
async def race_namespace(db_url: str) -> AsyncIterator[str]:
    """A namespace of its own (other test runs share the servers), dropped afterwards."""
    name = f"race{uuid.uuid4().hex[:12]}"
    await drop_namespace(db_url, name)
    yield name
    await drop_namespace(db_url, name)


async def test_processes_opening_one_fresh_namespace_at_once_all_succeed(
    db_url: str, race_namespace: str
) -> None:
    """Processes opening the same empty namespace at once (the default
    ``schema="create"``) MUST all succeed: one creates the schema, the others wait for it
    and use it; each then creates a task, and every task MUST be stored. Some start
    together, the others once the schema's creation is under way (its first table
    exists; on PostgreSQL and SQLite, whose DDL is transactional, it is then complete).

    Troubleshooting: the unlocked look at the schema may only accept a current one;
    anything else is decided again under the namespace's migration lock — on MariaDB/MySQL
    DDL commits statement by statement, so an opener reading while another creates the
    schema sees half of it (tables without a version, or an old revision).
    """
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", OPENER, db_url, race_namespace, f"p{n}",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for n in range(PROCESSES)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert b"ready\n" == await asyncio.wait_for(proc.stdout.readline(), 120)
        await _release(procs[:FIRST])
        await _first_table_exists(db_url, race_namespace)
        await _release(procs[FIRST:])
        outputs = [await asyncio.wait_for(proc.communicate(), 120) for proc in procs]
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    failures = [
        err.decode()[-1500:] for proc, (_, err) in zip(procs, outputs, strict=True)
        if proc.returncode != 0
    ]
    assert not failures, f"{len(failures)} of {PROCESSES} failed:\n" + "\n".join(failures)

    store = await SQLStore.open(db_url, namespace=race_namespace, schema="check")
    try:
        tasks = await store.list(TaskQuery(tenant=None, limit=100))
    finally:
        await store.aclose()
    assert {f"p{n}" for n in range(PROCESSES)} == {task.id for task in tasks}


def test_the_mariadb_lock_name_names_database_and_namespace_in_64_characters() -> None:
    """The ``GET_LOCK`` name MUST name the database (its names are server-wide) and the
    namespace, and MUST stay within MariaDB's 64 characters for the longest of both.

    Troubleshooting: a long database name is hashed, the namespace kept.
    """
    longest = Tables.build(prefix_of("n" * 30))
    assert "tasks-migrate:tasks_test:race_" == _lock_name("tasks_test", Tables.build("race_"))
    names = {_lock_name(database, longest) for database in ("d" * 64, "e" * 64, "db")}
    assert 3 == len(names)
    assert all(len(name) <= 64 and name.endswith(longest.prefix) for name in names)


async def test_an_opener_kept_from_the_mariadb_lock_gets_a_named_error(
    mariadb_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An opener that cannot have the namespace's lock within ``LOCK_TIMEOUT_S`` MUST fail
    with ``StoreUnavailable`` naming the lock and what to do, never wait unbounded.

    Troubleshooting: ``GET_LOCK`` returns 0 at its timeout; check its result.
    """
    namespace = f"held{uuid.uuid4().hex[:12]}"
    name = _lock_name(parse_url(mariadb_url).url.database, Tables.build(prefix_of(namespace)))
    monkeypatch.setattr(_migrate, "LOCK_TIMEOUT_S", 1)
    engine = create_async_engine(parse_url(mariadb_url).url)
    try:
        async with engine.connect() as holder:
            assert 1 == (await holder.execute(sa.select(sa.func.get_lock(name, 0)))).scalar()
            with pytest.raises(StoreUnavailable, match="IS_USED_LOCK"):
                await SQLStore.open(mariadb_url, namespace=namespace)
            await holder.execute(sa.select(sa.func.release_lock(name)))
        store = await SQLStore.open(mariadb_url, namespace=namespace)
        await store.aclose()
    finally:
        await engine.dispose()
        await drop_namespace(mariadb_url, namespace)
