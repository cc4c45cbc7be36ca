"""Database fixtures for the SQL store tests.

Servers come from ``TASKS_TEST_POSTGRES_URL`` and ``TASKS_TEST_MARIADB_URL`` (defaults:
the local test servers). The database in the URL is created when missing. An unreachable
server skips its tests locally and fails them when ``CI`` is set.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import ExecutableDDLElement
from sqlalchemy.sql.compiler import DDLCompiler
from tasks_core import ManualClock
from tasks_store_sql import SQLStore, migrate
from tasks_store_sql._schema import COUNTER, UNCOUNTED
from tasks_store_sql._url import parse_url

POSTGRES_URL = os.environ.get(
    "TASKS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/tasks_test"
)
MARIADB_URL = os.environ.get("TASKS_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/tasks_test")
POOL_SIZE = 4
"""Namespaces prepared per server; a test may open this many stores."""

Opener = Callable[..., Awaitable[SQLStore]]


class CreateDatabase(ExecutableDDLElement):
    """``CREATE DATABASE [IF NOT EXISTS] <name>``, the name quoted by the dialect."""

    def __init__(self, name: str, *, if_not_exists: bool = False) -> None:
        self.name = name
        self.if_not_exists = if_not_exists


@compiles(CreateDatabase)
def _create_database(element: CreateDatabase, compiler: DDLCompiler, **_: Any) -> str:
    exists = "IF NOT EXISTS " if element.if_not_exists else ""
    return "CREATE DATABASE " + exists + compiler.preparer.quote(element.name)


async def _ensure_database(url: str) -> None:
    target = parse_url(url)
    name = target.url.database
    # (``URL.set(database=None)`` keeps the database: ``None`` means "unchanged" there)
    server = target.url._replace(database="postgres" if target.kind == "postgresql" else None)
    engine = create_async_engine(server, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            if target.kind == "postgresql":
                found = await conn.execute(
                    sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
                )
                if found.first() is None:
                    await conn.execute(CreateDatabase(str(name)))
            else:
                await conn.execute(CreateDatabase(str(name), if_not_exists=True))
    finally:
        await engine.dispose()


def _server(url: str, what: str) -> str:
    try:
        asyncio.run(asyncio.wait_for(_ensure_database(url), 20))
    except Exception as exc:  # any failure means "not reachable"
        message = f"{what} is not reachable at {url}: {type(exc).__name__}: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return url


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The PostgreSQL test database URL (created if missing)."""
    return _server(POSTGRES_URL, "PostgreSQL")


@pytest.fixture(scope="session")
def mariadb_url() -> str:
    """The MariaDB test database URL (created if missing)."""
    return _server(MARIADB_URL, "MariaDB")


def _prepare_pool(url: str, label: str) -> list[str]:
    names = [f"{label}{i}" for i in range(POOL_SIZE)]

    async def prepare() -> None:
        for name in names:
            await migrate(url, namespace=name, to="base")
            await migrate(url, namespace=name)

    asyncio.run(prepare())
    return names


@pytest.fixture(scope="session")
def postgres_pool(postgres_url: str) -> list[str]:
    """Namespaces with the current schema on PostgreSQL, reused (emptied) per test."""
    return _prepare_pool(postgres_url, "pgt")


@pytest.fixture(scope="session")
def mariadb_pool(mariadb_url: str) -> list[str]:
    """Namespaces with the current schema on MariaDB, reused (emptied) per test."""
    return _prepare_pool(mariadb_url, "myt")


async def empty(store: SQLStore) -> None:
    """Delete every row of the store's namespace (a fresh namespace, without DDL)."""
    t = store.tables
    # Through the store's engine for this loop (not ``store.engine`` itself): this loop
    # becomes the store's home, as the store's own first use would make it.
    async with store._db.current().begin() as conn:
        await conn.execute(sa.delete(t.events))
        await conn.execute(sa.delete(t.members))
        await conn.execute(sa.delete(t.tasks))
        await conn.execute(sa.delete(t.claims))
        await conn.execute(sa.delete(t.locks).where(t.locks.c.name != COUNTER))
        await conn.execute(sa.update(t.locks).values(value=UNCOUNTED))  # as a new namespace


def pooled_opener(url: str, pool: list[str]) -> Callable[[], Iterator[Opener]]:
    """A fixture body: ``open(**options)`` gives the next emptied namespace of ``pool``."""

    def fixture() -> Iterator[Opener]:
        names = itertools.cycle(pool)

        async def open_store(**options: Any) -> SQLStore:
            namespace = next(names)  # a test holds at most POOL_SIZE stores open at once
            store = SQLStore(url, namespace=namespace, **options)
            await empty(store)
            return store

        yield open_store

    return fixture


@pytest.fixture
def sqlite_opener(tmp_path: Path) -> Opener:
    """``open(**options)``: a store on a new SQLite file."""
    counter = iter(range(1000))

    async def open_store(**options: Any) -> SQLStore:
        return await SQLStore.open(f"sqlite:///{tmp_path}/db{next(counter)}.db", **options)

    return open_store


@pytest.fixture
def postgres_opener(postgres_url: str, postgres_pool: list[str]) -> Iterator[Opener]:
    """``open(**options)``: a store on an emptied PostgreSQL namespace."""
    yield from pooled_opener(postgres_url, postgres_pool)()


@pytest.fixture
def mariadb_opener(mariadb_url: str, mariadb_pool: list[str]) -> Iterator[Opener]:
    """``open(**options)``: a store on an emptied MariaDB namespace."""
    yield from pooled_opener(mariadb_url, mariadb_pool)()


@pytest.fixture(params=["sqlite", "postgres", "mariadb"])
def any_opener(request: pytest.FixtureRequest) -> Opener:
    """Each database in turn."""
    opener: Opener = request.getfixturevalue(f"{request.param}_opener")
    return opener


@pytest.fixture
def anyio_backend() -> str:
    """The store is an asyncio library."""
    return "asyncio"


@pytest.fixture
def clock() -> ManualClock:
    """The injected clock of the stores a test opens with it."""
    return ManualClock()


@pytest.fixture
async def closing() -> AsyncIterator[Callable[[SQLStore], SQLStore]]:
    """``closing(store)``: close the store after the test."""
    stores: list[SQLStore] = []

    def keep(store: SQLStore) -> SQLStore:
        stores.append(store)
        return store

    yield keep
    for store in reversed(stores):
        await store.aclose()


@pytest.fixture
async def pg_store(
    postgres_opener: Opener, closing: Callable[[SQLStore], SQLStore], clock: ManualClock
) -> SQLStore:
    """A store on PostgreSQL with the manual ``clock`` (closed after the test)."""
    return closing(await postgres_opener(clock=clock))


@pytest.fixture
def store(pg_store: SQLStore) -> SQLStore:
    """``pg_store``, under the name the PostgreSQL claim tests take it (a module defining its
    own ``store`` fixture uses that one)."""
    return pg_store


@pytest.fixture(params=["sqlite", "postgres", "mariadb"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL of each kind (SQLite: a new file)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/tasks.db"
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def fresh_namespace(db_url: str) -> AsyncIterator[str]:
    """A namespace with no tables in ``db_url``, dropped again after the test; a name of
    its own, so that runs sharing a server (a CI run beside a developer's) never meet."""
    from tasks_store_sql.plugin import drop_namespace

    name = f"fresh_{os.urandom(4).hex()}"
    await drop_namespace(db_url, name)
    yield name
    await drop_namespace(db_url, name)


ORDERS = sa.Table("app_orders", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
"""The application's own business table, beside the store's (``app_engine``)."""


@pytest.fixture
async def app_engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    """The application's engine on ``db_url``, with its business table :data:`ORDERS`."""
    engine = create_async_engine(parse_url(db_url).url)
    async with engine.begin() as conn:
        await conn.run_sync(ORDERS.metadata.drop_all)
        await conn.run_sync(ORDERS.metadata.create_all)
    yield engine
    async with engine.begin() as conn:
        await conn.run_sync(ORDERS.metadata.drop_all)
    await engine.dispose()
