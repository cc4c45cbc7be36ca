"""An engine the application owns: the store uses it and never disposes of it; a task
can be created inside the application's own transaction."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import ORDERS, empty
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import QueuePool
from tasks_core import (
    App,
    CapacityExceeded,
    InvalidInput,
    NewTask,
    Owner,
    StoreUnavailable,
    SubmitItem,
    TaskContext,
    TaskNotFound,
    TaskQuery,
    TaskStatus,
    Unavailable,
    Work,
)
from tasks_core.events import Completed
from tasks_store_sql import SchemaMismatch, SQLStore
from tasks_store_sql._url import parse_url

pytestmark = pytest.mark.anyio


def _new(task_id: str) -> NewTask:
    return NewTask(id=task_id, tenant="default", owner=Owner("alice"), work=Work(name="job"))


async def test_the_store_never_disposes_of_an_application_engine(
    app_engine: AsyncEngine, fresh_namespace: str
) -> None:
    """Closing a store given ``engine=`` MUST leave that engine usable."""
    store = await SQLStore.open(engine=app_engine, namespace=fresh_namespace)
    await store.create(_new("t"))
    await store.aclose()
    async with app_engine.connect() as conn:
        assert 1 == (await conn.execute(sa.select(sa.literal(1)))).scalar()
    again = await SQLStore.open(engine=app_engine, namespace=fresh_namespace)
    try:
        assert ["t"] == [s.id for s in await again.list(TaskQuery(tenant=None))]
    finally:
        await again.aclose()


async def test_a_store_disposes_of_the_engine_it_made(db_url: str, fresh_namespace: str) -> None:
    """Closing a store opened from a URL MUST close every pooled connection it opened."""
    store = await SQLStore.open(db_url, namespace=fresh_namespace)
    await store.create(_new("t"))
    await store.aclose()
    pool = store.engine.pool
    assert isinstance(pool, QueuePool)
    assert 0 == pool.checkedin()


async def test_a_task_created_in_the_application_transaction_exists_only_if_it_commits(
    app_engine: AsyncEngine, fresh_namespace: str
) -> None:
    """``create(new, transaction=conn)`` MUST create the task inside the caller's
    transaction: rolled back with it, committed with it.

    Troubleshooting: run the create's statements on the caller's connection without
    beginning or committing anything of your own.
    """
    store = await SQLStore.open(engine=app_engine, namespace=fresh_namespace)
    try:
        async with app_engine.connect() as conn:
            trans = await conn.begin()
            await conn.execute(sa.insert(ORDERS).values(id=1))
            created = await store.create(_new("rolled-back"), transaction=conn)
            assert "rolled-back" == created.id
            await trans.rollback()
        with pytest.raises(TaskNotFound):
            await store.get("rolled-back", tenant=None)

        async with app_engine.begin() as conn:
            await conn.execute(sa.insert(ORDERS).values(id=2))
            await store.create(_new("committed"), transaction=conn)
        assert "committed" == (await store.get("committed", tenant=None)).id
        async with app_engine.connect() as conn:
            assert [2] == list((await conn.execute(sa.select(ORDERS.c.id))).scalars())
    finally:
        await store.aclose()


async def test_a_refused_create_leaves_the_application_transaction_usable(
    app_engine: AsyncEngine, fresh_namespace: str
) -> None:
    """A create refused inside the caller's transaction (capacity) MUST raise before
    writing anything, and the caller's own writes MUST still commit."""
    store = await SQLStore.open(engine=app_engine, namespace=fresh_namespace, max_tasks=1)
    try:
        await store.create(_new("first"))
        async with app_engine.begin() as conn:
            await conn.execute(sa.insert(ORDERS).values(id=3))
            with pytest.raises(CapacityExceeded):
                await store.create(_new("second"), transaction=conn)
        async with app_engine.connect() as conn:
            assert [3] == list((await conn.execute(sa.select(ORDERS.c.id))).scalars())
        assert ["first"] == [s.id for s in await store.list(TaskQuery(tenant=None))]
    finally:
        await store.aclose()


async def test_app_submit_in_the_application_transaction_runs_only_if_it_commits(
    app_engine: AsyncEngine, fresh_namespace: str
) -> None:
    """``App.submit(..., transaction=conn)`` MUST create the task inside the caller's
    transaction — gone with a rollback, there after a commit, and then run by a worker —
    and a keyed re-submit of a finished task MUST replace it inside the transaction too.

    Troubleshooting: the app passes ``transaction`` to ``store.create`` for the create and
    for the replace; the store runs both on that connection.
    """
    store = await SQLStore.open(engine=app_engine, namespace=fresh_namespace)
    app = App(store=store)
    ran: list[str] = []

    @app.task
    async def ship(ctx: TaskContext, order: int) -> int:
        ran.append(ctx.task_id)
        return order

    alice = Owner("alice")
    try:
        async with app:
            async with app_engine.connect() as conn:
                trans = await conn.begin()
                await conn.execute(sa.insert(ORDERS).values(id=10))
                lost = await app.submit(ship, {"order": 10}, alice, transaction=conn)
                await trans.rollback()
            with pytest.raises(TaskNotFound):
                await app.get(lost.id, alice)

            async with app_engine.begin() as conn:
                await conn.execute(sa.insert(ORDERS).values(id=11))
                kept = await app.submit(ship, {"order": 11}, alice, key="order-11",
                                        transaction=conn)
            async with app.worker(concurrency=1):
                done = await app.wait(kept.id, alice, timeout=30)
            assert (done.status, done.result, ran) == (TaskStatus.COMPLETED, 11, [kept.id])

            async with app_engine.connect() as conn:
                trans = await conn.begin()
                again = await app.submit(ship, {"order": 11}, alice, key="order-11",
                                         transaction=conn)
                assert again.outcome == "replaced"
                await trans.rollback()
            current = await app.get(kept.id, alice)
            assert (current.run_id, current.status) == (kept.run_id, TaskStatus.COMPLETED)
    finally:
        await store.aclose()


async def test_a_join_granting_watchers_inside_a_transaction_is_refused_at_once(
    app_engine: AsyncEngine, fresh_namespace: str
) -> None:
    """A keyed submit (or an item of ``submit_many``) inside the application's transaction
    that would join a live run and grant it watchers MUST be refused at once with
    ``Unavailable``, the transaction left usable: the grant is a write of the store's own,
    which would wait for the locks the transaction holds (the creators' row, the task's
    row, SQLite's write lock) while the transaction waits for it — a hang. A join that
    grants nothing still joins inside it."""
    store = await SQLStore.open(engine=app_engine, namespace=fresh_namespace)
    app = App(store=store)

    @app.task
    async def ship(ctx: TaskContext, order: int) -> int:
        return order

    alice, carol = Owner("alice"), Owner("carol")
    try:
        async with app:
            live = await app.submit(ship, {"order": 1}, alice, key="live", delay=600)
            async with app_engine.begin() as conn, asyncio.timeout(30):
                await conn.execute(sa.insert(ORDERS).values(id=1))
                with pytest.raises(Unavailable, match="outside the transaction"):
                    await app.submit(ship, {"order": 1}, alice, key="live", transaction=conn,
                                     watchers=[carol])
                with pytest.raises(Unavailable, match=r"item 1: .*outside the transaction"):
                    await app.submit_many(
                        [SubmitItem(ship, {"order": 2}, key="new"),
                         SubmitItem(ship, {"order": 1}, key="live", watchers=[carol])],
                        alice, transaction=conn)
                joined = await app.submit(ship, {"order": 1}, alice, key="live",
                                          transaction=conn)
                await conn.execute(sa.insert(ORDERS).values(id=2))
            assert "joined" == joined.outcome
            assert () == (await app.get(live.id, alice)).watchers
            with pytest.raises(TaskNotFound):
                await app.get("alice::new", alice)
            async with app_engine.connect() as conn:
                assert 2 == (await conn.execute(sa.select(sa.func.count()).select_from(
                    ORDERS))).scalar_one()
    finally:
        await store.aclose()


async def test_a_store_first_used_inside_a_transaction_refuses_a_missing_schema_at_once(
    app_engine: AsyncEngine, fresh_namespace: str
) -> None:
    """A store not opened yet, first used with ``transaction=`` on a namespace without a
    schema, MUST refuse with ``SchemaMismatch`` saying to open the store first — at once,
    not after waiting for a lock the caller's own transaction holds — and leave the
    caller's transaction usable; opened, the same call MUST succeed.

    Troubleshooting: check the schema on the caller's connection; never create or migrate
    it on another connection while the caller's transaction is open (SQLite: that
    connection waits for the caller's write lock until ``busy_timeout``).
    """
    store = SQLStore(engine=app_engine, namespace=fresh_namespace)
    try:
        async with app_engine.begin() as conn:
            await conn.execute(sa.insert(ORDERS).values(id=20))
            with pytest.raises(SchemaMismatch, match="open the store"):
                await store.create(_new("early"), transaction=conn)
        async with app_engine.connect() as conn:
            assert [20] == list((await conn.execute(sa.select(ORDERS.c.id))).scalars())
        await (await SQLStore.open(engine=app_engine, namespace=fresh_namespace)).aclose()
        async with app_engine.begin() as conn:
            await store.create(_new("after-open"), transaction=conn)
        assert "after-open" == (await store.get("after-open", tenant=None)).id
        with pytest.raises(InvalidInput, match="AsyncConnection"):
            await store.create(_new("not-a-connection"), transaction=object())
    finally:
        await store.aclose()


async def test_a_connection_to_another_database_is_refused_by_name(
    app_engine: AsyncEngine, fresh_namespace: str, tmp_path: Path
) -> None:
    """``transaction=conn`` on a connection to another database — of another kind, or
    another SQLite file — MUST be refused with ``InvalidInput`` saying so, before any
    statement runs on it (it failed as ``StoreError``, or as ``StoreUnavailable``, an
    outage to retry forever); a closed connection is refused as closed."""
    store = await SQLStore.open(engine=app_engine, namespace=fresh_namespace)
    other = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'other.db'}")
    try:
        async with other.begin() as conn:
            with pytest.raises(InvalidInput, match="another database than this store's"):
                await store.create(_new("a"), transaction=conn)
            with pytest.raises(InvalidInput, match="another database than this store's"):
                await store.create_many([_new("b")], transaction=conn)
            assert [] == (await conn.execute(sa.text(
                "SELECT name FROM sqlite_master"))).all()
        async with app_engine.connect() as conn:
            await conn.close()
            with pytest.raises(InvalidInput, match="closed"):
                await store.create(_new("c"), transaction=conn)
        assert [] == await store.list(TaskQuery(tenant=None))
    finally:
        await other.dispose()
        await store.aclose()


async def test_a_sync_connection_is_refused_saying_why(tmp_path: Path) -> None:
    """A sync SQLAlchemy ``Connection`` (a Flask app's) MUST be refused naming what to use
    instead, not only "must be the AsyncConnection"."""
    store = await SQLStore.open(f"sqlite:///{tmp_path / 'tasks.db'}")
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'tasks.db'}")
    try:
        with engine.begin() as conn, pytest.raises(
                InvalidInput, match=r"a sync Connection cannot be.*AsyncEngine"):
            await store.create(_new("a"), transaction=conn)  # type: ignore[arg-type]
    finally:
        engine.dispose()
        await store.aclose()


async def test_a_connection_outside_a_transaction_is_refused_before_anything_is_written(
    app_engine: AsyncEngine, fresh_namespace: str
) -> None:
    """``transaction=conn`` on a connection that has not begun a transaction MUST be
    refused (``InvalidInput`` saying to begin one) by ``create``, ``create_many`` and
    ``App.submit``, before anything is written — and without beginning one on the
    caller's connection: SQLAlchemy would autobegin it, and the task vanish when the block
    ended without a commit.

    Troubleshooting: check ``conn.in_transaction()`` where the store receives the
    connection, before the schema check runs a statement on it.
    """
    store = await SQLStore.open(engine=app_engine, namespace=fresh_namespace)
    app = App(store=store)
    app.task(name="job")(_job)
    try:
        async with app, app_engine.connect() as conn:
            for call in (lambda: store.create(_new("a"), transaction=conn),
                         lambda: store.create_many([_new("b")], transaction=conn),
                         lambda: app.submit("job", None, Owner("alice"), transaction=conn),
                         lambda: app.submit_many([{"task": "job"}], Owner("alice"),
                                                 transaction=conn)):
                with pytest.raises(InvalidInput, match=r"transaction= takes a connection "
                                   r"inside a transaction: async with conn\.begin\(\)"):
                    await call()
                assert not conn.in_transaction()
        assert [] == await store.list(TaskQuery(tenant=None))
    finally:
        await store.aclose()


async def _job(ctx: TaskContext) -> None:
    return None


@pytest.fixture
async def pg_namespace(postgres_url: str) -> AsyncIterator[str]:
    """A namespace with no tables in PostgreSQL, dropped again after the test."""
    from tasks_store_sql.plugin import drop_namespace

    await drop_namespace(postgres_url, "smallpool")
    yield "smallpool"
    await drop_namespace(postgres_url, "smallpool")


@pytest.mark.parametrize("own_engine", [True, False], ids=["store-engine", "app-engine"])
async def test_a_small_pool_is_never_starved_by_connections_the_store_keeps(
    postgres_url: str, pg_namespace: str, own_engine: bool
) -> None:
    """The store keeps a few connections checked out between hot-path calls, but never
    the pool's last free one: with a pool of two, after concurrent claims and
    completions, both the store's own transactions and the application's checkout MUST
    get a connection at once (a pool timeout of one second fails them otherwise).

    Troubleshooting: ``Database._keep`` in ``_db.py``: a connection goes back to the pool
    when keeping it would leave the pool no free connection.
    """
    options = {"pool_size": 2, "max_overflow": 0, "pool_timeout": 1}
    url = parse_url(postgres_url).url
    engine = None if own_engine else create_async_engine(url, **options)
    store = (await SQLStore.open(postgres_url, namespace=pg_namespace,
                                 engine_options=options) if own_engine
             else await SQLStore.open(engine=engine, namespace=pg_namespace))
    try:
        for index in range(8):
            await store.create(_new(f"t{index}"))
        claims = await asyncio.gather(*(
            store.claim_next("w", 60, queues=["default"], limit=2) for _ in range(4)))
        assert 8 == sum(len(claimed) for claimed in claims)
        done = [await store.transition(c.snapshot.id, c.snapshot.revision,
                                       Completed(event_id=f"{c.snapshot.id}:done"), c.lease)
                for claimed in claims for c in claimed]
        assert {"applied"} == {t.outcome for t in done}
        assert 8 == len(await store.list(TaskQuery(tenant=None)))
        async with store.engine.connect() as conn:
            assert 1 == (await conn.execute(sa.select(sa.literal(1)))).scalar()
    finally:
        await store.aclose()
        if engine is not None:
            await engine.dispose()


def test_an_app_refuses_store_limits_this_store_was_not_opened_with() -> None:
    """An ``App`` given a SQL store MUST refuse ``Limits`` whose ``max_tasks`` the store
    does not enforce (``InvalidInput``) and accept those it does: the store's own
    ``limits`` are what the app compares with."""
    from tasks_core import Limits

    with pytest.raises(InvalidInput, match=r"max_tasks=1 .*where the store is opened"):
        App(store=SQLStore("sqlite://"), limits=Limits(max_tasks=1))
    App(store=SQLStore("sqlite://", max_tasks=1), limits=Limits(max_tasks=1))


@pytest.mark.parametrize("server", ["postgres", "mariadb"])
async def test_a_create_in_a_repeatable_read_transaction_counts_what_others_committed(
    server: str, postgres_url: str, postgres_pool: list[str], mariadb_url: str,
    mariadb_pool: list[str],
) -> None:
    """In an application's transaction at REPEATABLE READ (MariaDB's default), a plain
    read sees the rows as of the transaction's first read. A create inside such a
    transaction MUST still not pass ``max_active_tasks_per_scope`` because of tasks other
    creators committed since — here the last place of the tenant, taken by another store
    after the transaction read: MariaDB refuses it (``CapacityExceeded``), PostgreSQL
    fails it as a serialization failure (``StoreUnavailable``: roll back and retry).

    Troubleshooting: on MariaDB read the tenant's bound and count its active tasks with
    locking reads (``FOR UPDATE`` / ``LOCK IN SHARE MODE``), which read what is committed.
    """
    url, namespace = {"postgres": (postgres_url, postgres_pool[0]),
                      "mariadb": (mariadb_url, mariadb_pool[0])}[server]
    driver = {"postgres": "postgresql+asyncpg://", "mariadb": "mysql+asyncmy://"}[server]
    app_engine = create_async_engine(url.replace(url.split("//")[0] + "//", driver, 1),
                                     isolation_level="REPEATABLE READ")
    store = await SQLStore.open(engine=app_engine, namespace=namespace,
                                max_active_tasks_per_scope=2)
    other = await SQLStore.open(url, namespace=namespace, max_active_tasks_per_scope=2)
    try:
        await empty(store)
        for n in range(3):  # more stored tasks than the limit: the tenant must be read
            await store.create(_new(f"o{n}").model_copy(update={"tenant": f"other{n}"}))
        await store.create(_new("first"))
        async with app_engine.connect() as conn:
            await conn.begin()
            await conn.execute(sa.select(sa.func.count()).select_from(store.tables.tasks))
            await other.create(_new("second"))  # committed after the transaction's view
            with pytest.raises((CapacityExceeded, StoreUnavailable)):
                await store.create(_new("third"), transaction=conn)
            await conn.rollback()
        stored = await other.list(TaskQuery(tenant="default"))
        assert sorted(s.id for s in stored) == ["first", "second"]
    finally:
        await store.aclose()
        await other.aclose()
        await app_engine.dispose()
