"""Schema migrations: up, down and up again keeping data; refusing mismatched schemas."""

from __future__ import annotations

import asyncio
import io
import logging
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from rich.console import Console
from tasks_core import (
    CapacityExceeded,
    Completed,
    ManualClock,
    NewTask,
    Owner,
    TaskQuery,
    Work,
)
from tasks_core.cli import run
from tasks_core.errors import InvalidInput, StoreError
from tasks_store_sql import SchemaMismatch, SQLStore, current_revision, head, migrate, revisions

pytestmark = pytest.mark.anyio

ALICE = Owner("alice")


def _new(task_id: str) -> NewTask:
    return NewTask(id=task_id, tenant="default", owner=ALICE, work=Work(name="job"))


async def test_migrations_go_up_down_and_up_again_keeping_tasks(
    db_url: str, fresh_namespace: str
) -> None:
    """Migrating to head, down one revision and up again MUST keep every task and its
    history, and the creators' counter MUST be rebuilt from the stored tasks.

    Troubleshooting: a downgrade may drop only what its upgrade added; an upgrade that
    adds derived data (the task counter) must backfill it from existing rows.
    """
    ns = fresh_namespace
    assert None is await migrate(db_url, namespace=ns)
    clock = ManualClock()
    store = await SQLStore.open(db_url, namespace=ns, clock=clock, schema="check")
    try:
        await store.create(_new("kept"))
        [held] = await store.claim_next("w1", 30, queues=["default"])
        await store.transition("kept", 0, Completed(event_id="done", result=7), held.lease)
        before = (await store.get("kept", tenant=None), await store.history("kept", tenant=None))
    finally:
        await store.aclose()

    assert head() == await migrate(db_url, namespace=ns, to=revisions()[-2])
    assert revisions()[-2] == await current_revision(db_url, namespace=ns)
    assert head() != revisions()[-2]
    assert revisions()[-2] == await migrate(db_url, namespace=ns)

    store = await SQLStore.open(db_url, namespace=ns, clock=clock, max_tasks=2, schema="check")
    try:
        after = (await store.get("kept", tenant=None), await store.history("kept", tenant=None))
        assert before == after
        await store.create(_new("second"))
        with pytest.raises(CapacityExceeded):
            await store.create(_new("third"))
    finally:
        await store.aclose()


async def _lock_rows(store: SQLStore) -> list[str]:
    locks = store.tables.locks
    async with store.engine.connect() as conn:
        return sorted((await conn.execute(sa.select(locks.c.name))).scalars())


@pytest.mark.parametrize(("older", "row"), [("0004", "tasks"), ("0014", "creators")])
async def test_creates_stop_on_the_far_side_of_a_migration_of_the_count(
    db_url: str, fresh_namespace: str, older: str, row: str
) -> None:
    """Revision 0005 makes every create keep a bound per tenant (``scope:<tenant>``), and
    0015 makes a namespace uncounted (``_schema.UNCOUNTED``): code from before either
    would keep the count or the bounds wrong, and a limit trust them. So each renames the
    creators' row (``tasks`` → ``creators`` → ``task_count``) and its downgrade renames it
    back (0005's deleting the bounds, 0015's counting the tasks): a process still running
    on the other side of the migration — code from before it, or, as here, code from
    after it across a downgrade — finds no creators' row, and its creates MUST fail
    (``StoreError``) with nothing stored, never pass a limit.

    Troubleshooting: keep the renames in both directions of 0005 and 0015, and refuse a
    create that finds no creators' row (``MISSING_COUNTER``) on every path.
    """
    ns = fresh_namespace
    await migrate(db_url, namespace=ns)
    store = await SQLStore.open(db_url, namespace=ns, schema="check")
    try:
        await store.create(_new("before"))
        assert await _lock_rows(store) == ["task_count"]

        await migrate(db_url, namespace=ns, to=older)
        assert await _lock_rows(store) == [row]
        # (this code also writes columns of 0006, which PostgreSQL refuses at once)
        with pytest.raises(StoreError, match=r"creators' lock row is missing|refused"):
            await store.create(_new("during"))

        await migrate(db_url, namespace=ns)
        assert await _lock_rows(store) == ["task_count"]  # no bound survived the downgrade
        await store.create(_new("after"))
        stored = await store.list(TaskQuery(tenant=None))
        assert sorted(s.id for s in stored) == ["after", "before"]
    finally:
        await store.aclose()


async def _tasks(*argv: str) -> str:
    out = io.StringIO()
    assert 0 == await run(list(argv), console=Console(file=out, width=200, color_system=None))
    return out.getvalue().strip()


async def test_tasks_migrate_moves_the_schema_and_a_refused_store_opens_after_it(
    db_url: str, fresh_namespace: str
) -> None:
    """``tasks migrate --store URL`` MUST create a missing schema, say when there is
    nothing to do, move down with ``--to`` and back up, so that a store refused for an
    older schema opens afterwards; an unknown revision MUST be refused with nothing
    changed.

    Troubleshooting: the command must reach the plugin's ``StoreSpec.migrate`` without
    opening the store (opening refuses an older schema).
    """
    ns, older = fresh_namespace, revisions()[-2]
    cli = ("migrate", "--store", db_url, "--namespace", ns)
    assert f"schema migrated from nothing to {head()}" == await _tasks(*cli)
    assert f"schema already at {head()}" == await _tasks(*cli)
    assert f"schema migrated from {head()} to {older}" == await _tasks(*cli, "--to", older)
    with pytest.raises(SchemaMismatch, match="tasks migrate --store URL"):
        await SQLStore.open(db_url, namespace=ns)
    with pytest.raises(InvalidInput, match="Unknown schema revision"):
        await _tasks(*cli, "--to", "no_such_revision")
    assert older == await current_revision(db_url, namespace=ns)
    assert f"schema migrated from {older} to {head()}" == await _tasks(*cli)
    store = await SQLStore.open(db_url, namespace=ns, schema="check")
    await store.aclose()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
async def test_tasks_migrate_refuses_an_in_memory_sqlite_database(url: str) -> None:
    """``tasks migrate`` on an in-memory SQLite database MUST be refused (``InvalidInput``
    saying why), never "schema already at nothing" for a database it made and lost —
    with ``--to`` too."""
    for extra in ((), ("--to", revisions()[0])):
        with pytest.raises(InvalidInput, match="in-memory SQLite database"):
            await _tasks("migrate", "--store", url, *extra)


async def test_an_older_schema_is_refused_unless_upgrade_is_asked(
    db_url: str, fresh_namespace: str
) -> None:
    """Opening a namespace at an older revision MUST raise ``SchemaMismatch`` saying how
    to migrate; ``schema="upgrade"`` MUST migrate it and open.

    Troubleshooting: compare the stored revision with the shipped head before any
    operation; never guess at a schema.
    """
    await migrate(db_url, namespace=fresh_namespace, to=revisions()[0])
    with pytest.raises(SchemaMismatch, match="older") as refused:
        await SQLStore.open(db_url, namespace=fresh_namespace)
    assert "migrate" in str(refused.value)
    store = await SQLStore.open(db_url, namespace=fresh_namespace, schema="upgrade")
    try:
        assert head() == await store.schema_revision()
    finally:
        await store.aclose()


async def test_a_newer_schema_is_refused_even_with_upgrade(
    db_url: str, fresh_namespace: str
) -> None:
    """A namespace at a revision this code does not ship MUST be refused with
    ``SchemaMismatch`` (never downgraded or used), whatever the ``schema`` option.

    Troubleshooting: an unknown revision means newer code migrated the database; the
    fix is upgrading tasks-store-sql, which the message says.
    """
    await migrate(db_url, namespace=fresh_namespace)
    store = SQLStore(db_url, namespace=fresh_namespace)
    try:
        async with store.engine.begin() as conn:
            version = sa.table(store.tables.version_table, sa.column("version_num"))
            await conn.execute(sa.update(version).values(version_num="9999_future"))
    finally:
        await store.aclose()
    for mode in ("create", "upgrade", "check"):
        with pytest.raises(SchemaMismatch, match="upgrade tasks-store-sql"):
            await SQLStore.open(db_url, namespace=fresh_namespace, schema=mode)
    with pytest.raises(SchemaMismatch):
        await migrate(db_url, namespace=fresh_namespace)


async def test_a_fresh_namespace_migrates_without_a_warning(
    db_url: str, fresh_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Migrating a fresh namespace, down to nothing and up again MUST log no warning on
    any database (MariaDB's driver used to warn that it ignores the name Alembic gives
    the version table's primary key); down to ``base`` MUST leave no table of the
    namespace behind, the version table included.

    Troubleshooting: a warning here is printed by every ``tasks migrate`` a user runs.
    """
    caplog.set_level(logging.WARNING)
    assert None is await migrate(db_url, namespace=fresh_namespace)
    assert head() == await migrate(db_url, namespace=fresh_namespace, to="base")
    store = SQLStore(db_url, namespace=fresh_namespace, schema="check")
    try:
        async with store.engine.connect() as conn:
            names = await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names())
    finally:
        await store.aclose()
    assert [] == [name for name in names if name.startswith(f"{fresh_namespace}_")]
    assert None is await migrate(db_url, namespace=fresh_namespace)
    assert head() == await current_revision(db_url, namespace=fresh_namespace)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_opening_a_fresh_namespace_logs_one_info_line_of_its_own(
    db_url: str, fresh_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The first open of a namespace MUST log one INFO line of the store's (the revisions
    it moved between) and none of Alembic's (its plugins, its context, one line per
    revision): an application logging at INFO sees one line, not dozens. With the
    ``alembic`` logger's own level set, Alembic's lines show as the user asked.

    Troubleshooting: Alembic lines here come from a logger the filter of
    ``_migrate`` is not attached to (a new Alembic logger name).
    """
    caplog.set_level(logging.INFO)
    store = await SQLStore.open(db_url, namespace=fresh_namespace)
    await store.aclose()
    alembic = [r.name for r in caplog.records if r.name.startswith("alembic")]
    ours = [r.getMessage() for r in caplog.records if r.name == "tasks_store_sql"]
    assert (alembic, len(ours)) == ([], 1)
    assert head() in ours[0]
    assert fresh_namespace in ours[0]
    caplog.clear()
    logging.getLogger("alembic").setLevel(logging.INFO)
    try:
        await migrate(db_url, namespace=fresh_namespace, to="base")
    finally:
        logging.getLogger("alembic").setLevel(logging.NOTSET)
    assert any(r.name.startswith("alembic") for r in caplog.records)


async def test_check_mode_never_creates_a_schema(db_url: str, fresh_namespace: str) -> None:
    """``schema="check"`` on an empty namespace MUST raise ``SchemaMismatch`` and create
    nothing."""
    with pytest.raises(SchemaMismatch, match="no tasks schema"):
        await SQLStore.open(db_url, namespace=fresh_namespace, schema="check")
    assert None is await current_revision(db_url, namespace=fresh_namespace)


async def test_a_foreign_table_in_the_namespace_is_refused(
    db_url: str, fresh_namespace: str
) -> None:
    """A ``tasks`` table without a schema version MUST be refused, not adopted."""
    store = SQLStore(db_url, namespace=fresh_namespace)
    try:
        async with store.engine.begin() as conn:
            foreign = sa.Table(f"{fresh_namespace}_tasks", sa.MetaData(),
                               sa.Column("x", sa.Integer))
            await conn.run_sync(foreign.create)
        with pytest.raises(SchemaMismatch, match="not a tasks store"):
            await store.get("any", tenant=None)
    finally:
        await store.aclose()


@pytest.mark.parametrize("table", ["tasks", "task_events"])
async def test_an_application_table_of_a_store_table_s_name_is_refused_naming_it(
    db_url: str, fresh_namespace: str, table: str
) -> None:
    """An application table named like any of the store's tables (``task_events`` too, not
    only ``tasks``), without a tasks schema version, MUST be refused by the opening that
    would create the schema and by ``migrate`` to any revision, ``base`` included —
    ``SchemaMismatch`` naming the table and the way out (a namespace) — before any DDL: the
    create failed on the duplicate with a raw driver code (on MariaDB after creating the
    other tables), ``--to base`` reported "migrated from nothing to" the tables' names; the
    application's table MUST keep its rows, and the namespace reads as having no revision."""
    name = f"{fresh_namespace}_{table}"
    engine = SQLStore(db_url, namespace=fresh_namespace)
    try:
        async with engine.engine.begin() as conn:
            own = sa.Table(name, sa.MetaData(), sa.Column("x", sa.Integer))
            await conn.run_sync(own.create)
            await conn.execute(own.insert().values(x=7))
        for opening in (lambda: SQLStore.open(db_url, namespace=fresh_namespace),
                        lambda: migrate(db_url, namespace=fresh_namespace),
                        lambda: migrate(db_url, namespace=fresh_namespace, to="base")):
            with pytest.raises(SchemaMismatch, match=rf"{name}.*namespace") as refused:
                await opening()
            assert "not a tasks store" in str(refused.value)
        async with engine.engine.connect() as conn:
            left = await conn.run_sync(lambda c: sa.inspect(c).get_table_names())
            assert 7 == (await conn.execute(sa.select(own.c.x))).scalar_one()
        assert [name] == [t for t in left if t.startswith(fresh_namespace)]
        assert await current_revision(db_url, namespace=fresh_namespace) is None
    finally:
        await engine.aclose()


async def test_an_empty_version_table_alone_is_an_empty_namespace(
    db_url: str, fresh_namespace: str
) -> None:
    """A namespace holding only the store's (empty) version table — a first migration that
    died right after Alembic made it, on MariaDB — MUST read as empty and be created, not
    refused as another program's tables."""
    store = SQLStore(db_url, namespace=fresh_namespace)
    try:
        async with store.engine.begin() as conn:
            version = sa.Table(store.tables.version_table, sa.MetaData(),
                               sa.Column("version_num", sa.String(32), primary_key=True))
            await conn.run_sync(version.create)
    finally:
        await store.aclose()
    opened = await SQLStore.open(db_url, namespace=fresh_namespace)
    await opened.aclose()
    assert await current_revision(db_url, namespace=fresh_namespace) is not None


async def test_the_migration_chain_builds_exactly_the_declared_schema(
    db_url: str, fresh_namespace: str
) -> None:
    """Running every migration MUST produce exactly the tables, columns and indexes the
    code queries (``_schema.Tables``): Alembic's autogenerate finds no difference.

    Troubleshooting: a schema change needs both a new revision and the matching change in
    ``_schema.py``.
    """
    await migrate(db_url, namespace=fresh_namespace)
    store = SQLStore(db_url, namespace=fresh_namespace, schema="check")
    names = set(store.tables.names) - {store.tables.version_table}

    def diff(sync_conn: sa.Connection) -> list[Any]:
        context = MigrationContext.configure(
            sync_conn,
            opts={
                "compare_type": True,
                "include_name": lambda name, kind, _parent: kind != "table" or name in names,
            },
        )
        return list(compare_metadata(context, store.tables.metadata))

    try:
        async with store.engine.connect() as conn:
            assert [] == await conn.run_sync(diff)
    finally:
        await store.aclose()


async def test_processes_opening_a_fresh_namespace_together_both_succeed(
    db_url: str, fresh_namespace: str
) -> None:
    """Several stores (separate engines) opening one empty namespace at once MUST all
    succeed with one schema: the migration runs under a lock.

    Troubleshooting: take the per-namespace migration lock, then re-read the revision
    before migrating.
    """
    opened = await asyncio.gather(
        *(SQLStore.open(db_url, namespace=fresh_namespace) for _ in range(3))
    )
    try:
        await opened[0].create(_new("one"))
        assert ["one"] == [s.id for s in await opened[2].list(_all())]
    finally:
        for store in opened:
            await store.aclose()


def _all() -> Any:
    from tasks_core import TaskQuery

    return TaskQuery(tenant=None)


async def test_mariadb_holds_the_migration_lock_until_the_migration_committed(
    mariadb_url: str,
) -> None:
    """On MariaDB the migration lock (``GET_LOCK``, held by a session, not a transaction)
    MUST be released only after the migration's transaction committed — else another
    migrator takes the lock, reads the old revision and runs the same DDL again
    (duplicate column).

    Troubleshooting: ``migrate_database`` in ``_migrate.py`` takes it on a connection of
    its own and releases it after the migrating connection's commit.
    """
    from tasks_store_sql._migrate import migrate_database
    from tasks_store_sql.plugin import drop_namespace

    await drop_namespace(mariadb_url, "lockorder")
    store = SQLStore(mariadb_url, namespace="lockorder", schema="check")
    seen: list[str] = []

    def statement(conn: Any, cursor: Any, text: str, *_: Any) -> None:
        if "lock(" in text.lower():
            seen.append(text.split("(")[0].split()[-1].lower())
        elif "tasks_schema_version" in text and text.lstrip().upper().startswith(
                ("INSERT", "UPDATE")):
            seen.append("version")

    sync_engine = store.engine.sync_engine
    sa.event.listen(sync_engine, "before_cursor_execute", statement)
    sa.event.listen(sync_engine, "commit", lambda conn: seen.append("commit"))
    try:
        await migrate_database(store._db, store.tables, "head")
    finally:
        await store.aclose()
        await drop_namespace(mariadb_url, "lockorder")
    assert "get_lock" == seen[0]
    assert "release_lock" == seen[-1]
    written = len(seen) - 1 - seen[::-1].index("version")
    assert "commit" in seen[written:-1]  # the version's commit, before the release


@pytest.fixture(params=["postgres", "mariadb"])
def server_url(request: pytest.FixtureRequest) -> str:
    """Each server database."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


async def test_a_store_on_a_pool_of_one_migrates_its_namespace(server_url: str) -> None:
    """Creating the schema of an empty namespace MUST need no more than one connection
    (the migration lock and the migration share it): a store whose pool holds one opens
    a fresh namespace and works.

    Troubleshooting: ``_locked`` in ``_migrate.py``: MariaDB's ``GET_LOCK`` is taken on
    the migrating connection itself, before its transaction.
    """
    from tasks_store_sql.plugin import drop_namespace

    url = server_url
    await drop_namespace(url, "poolofone")
    store = await SQLStore.open(url, namespace="poolofone", engine_options={
        "pool_size": 1, "max_overflow": 0, "pool_timeout": 2})
    try:
        await store.create(_new("one"))
        assert ["one"] == [s.id for s in await store.list(_all())]
    finally:
        await store.aclose()
        await drop_namespace(url, "poolofone")
