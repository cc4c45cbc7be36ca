"""The ``tasks`` plugin of tasks-store-sql: serves ``sqlite://``, ``postgresql://``
(``postgres://``), ``mysql://`` and ``mariadb://`` (store name ``sql``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core.errors import InvalidInput
from tasks_core.plugins import StoreSpec, hookimpl

from tasks_store_sql._db import Database
from tasks_store_sql._dialect import create_engine
from tasks_store_sql._migrate import drop_every_table
from tasks_store_sql._options import STORE_OPTIONS as OPTIONS
from tasks_store_sql._schema import Tables, check_namespace, prefix_of
from tasks_store_sql._url import parse_url
from tasks_store_sql.migrations_api import current_revision, migrate
from tasks_store_sql.store import SQLStore

__all__ = ["OPTIONS", "open_sql", "tasks_stores"]

async def open_sql(url: str, **options: Any) -> SQLStore:
    """Open an ``SQLStore`` for ``url`` and check (or create) its schema.

    Raises:
        InvalidInput: not an SQL URL, or an unknown option.
        SchemaMismatch: the schema is older or newer than this code.
        StoreUnavailable: the database is unavailable.
    """
    if options.get("engine") is not None:
        return await SQLStore.open(**options)
    options.pop("engine", None)
    return await SQLStore.open(url, **options)


async def create_namespace(base_url: str, namespace: str) -> None:
    """Create the empty, current schema of ``namespace`` (contract-suite support)."""
    await migrate(base_url, namespace=namespace)


async def migrate_schema(
    url: str, *, to: str = "head", namespace: str | None = None
) -> tuple[str | None, str | None]:
    """``tasks migrate``: move the namespace's schema to ``to``; the revisions before and
    after (``None``: no schema).

    Raises:
        InvalidInput: a bad URL, namespace or revision; an in-memory SQLite database (it
            lives and dies with the process that opens it: a migration would change a
            database nobody else sees, and report nothing).
        SchemaMismatch: the namespace is at a revision this code does not know.
        StoreUnavailable: the database is unavailable.
    """
    if parse_url(url).memory:
        raise InvalidInput("an in-memory SQLite database (sqlite://) lives and dies with the "
                           "process that opens it: there is no schema to migrate (the store "
                           "makes its tables when it opens); migrate a file or a server")
    before = await migrate(url, namespace=namespace, to=to)
    return before, await current_revision(url, namespace=namespace)


async def drop_namespace(base_url: str, namespace: str) -> None:
    """Drop every table of ``namespace`` (contract-suite support)."""
    target = parse_url(base_url)
    tables = Tables.build(prefix_of(check_namespace(namespace)))
    engine = create_engine(target, busy_timeout=30)
    db = Database(engine=engine, kind=target.kind, owns_engine=True, managed_sqlite=True)
    try:
        async with db.connection(write=True) as conn:
            await conn.run_sync(drop_every_table, tables)
    finally:
        await db.dispose()


async def _corrupt(store: SQLStore, task_id: str) -> None:
    await store._corrupt(task_id)


class _Transaction:
    """An application transaction on a connection of the store's engine (test support:
    ``StoreSpec.begin_transaction``)."""

    def __init__(self, handle: AsyncConnection) -> None:
        self.handle = handle

    async def commit(self) -> None:
        if not self.handle.closed:
            await self.handle.commit()
            await self.handle.close()

    async def rollback(self) -> None:
        if not self.handle.closed:
            await self.handle.rollback()
            await self.handle.close()


async def _begin_transaction(store: SQLStore, started: bool) -> _Transaction:
    """A connection of ``store``'s engine, inside a transaction when ``started``."""
    connection = await store.engine.connect()
    if started:
        await connection.begin()
    return _Transaction(connection)


@hookimpl
def tasks_stores() -> StoreSpec:
    """Declare the SQL store."""
    return StoreSpec(
        name="sql",
        schemes=("sqlite", "postgresql", "postgres", "mysql", "mariadb"),
        factory=open_sql,
        capabilities=SQLStore.CAPABILITIES,
        distribution="tasks-store-sql",
        create_namespace=create_namespace,
        drop_namespace=drop_namespace,
        migrate=migrate_schema,
        corrupt=_corrupt,
        begin_transaction=_begin_transaction,
    )
