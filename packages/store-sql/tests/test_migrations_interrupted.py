"""A migration cut short: whole again on PostgreSQL and SQLite, refused on MariaDB/MySQL."""

from __future__ import annotations

import os
from typing import Any

import pytest
from alembic.operations import Operations
from tasks_core import NewTask, Owner, StoreUnavailable, Work
from tasks_store_sql import SchemaMismatch, SQLStore, current_revision, head, migrate

pytestmark = pytest.mark.anyio

BEFORE = "0010"
"""The revision the cut-short migrations start from (0011 adds several columns)."""


def _cut_at_the_second_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the second ``add_column`` of the next migration lose its connection."""
    add_column = Operations.add_column
    calls = []

    def cut(self: Operations, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 2:
            raise ConnectionResetError("the connection was cut")
        return add_column(self, *args, **kwargs)

    monkeypatch.setattr(Operations, "add_column", cut)


async def _usable(url: str, namespace: str) -> None:
    """The namespace opens at the head revision and stores a task."""
    store = await SQLStore.open(url, namespace=namespace, schema="check")
    try:
        new = NewTask(id="t", tenant="default", owner=Owner("alice"), work=Work(name="job"))
        assert "t" == (await store.create(new)).id
    finally:
        await store.aclose()
    assert head() == await current_revision(url, namespace=namespace)


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
async def test_a_migration_cut_short_leaves_the_schema_whole_where_ddl_is_transactional(
    db_url: str, fresh_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL and SQLite a migration cut short MUST leave the schema at the revision
    it started from, and migrating again MUST finish it."""
    await migrate(db_url, namespace=fresh_namespace, to=BEFORE)
    with monkeypatch.context() as patched:
        _cut_at_the_second_column(patched)
        with pytest.raises(StoreUnavailable):
            await migrate(db_url, namespace=fresh_namespace)
    assert BEFORE == await current_revision(db_url, namespace=fresh_namespace)
    assert BEFORE == await migrate(db_url, namespace=fresh_namespace)
    await _usable(db_url, fresh_namespace)


async def test_a_migration_cut_short_on_mariadb_is_refused_until_based_again(
    mariadb_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MariaDB/MySQL commit each DDL statement on its own: a migration cut short there
    MUST leave its namespace refused — by ``migrate`` and by an opening, ``SchemaMismatch``
    naming the two revisions and the ways out — never read as its old revision (migrating
    again failed on a duplicate column reported as an outage, or, going up past a revision
    half undone, reported success over a schema the store could not read); ``--to base``
    MUST then drop the namespace's tables, and a migration make it anew.

    Troubleshooting: the marker table ``_migrate._run`` holds while a MariaDB/MySQL
    migration runs (``Tables.migrating_table``), read first by ``_migrate._state``.
    """
    from tasks_store_sql.plugin import drop_namespace

    namespace = f"cutshort_{os.urandom(3).hex()}"
    await drop_namespace(mariadb_url, namespace)
    try:
        await migrate(mariadb_url, namespace=namespace, to=BEFORE)
        with monkeypatch.context() as patched:
            _cut_at_the_second_column(patched)
            with pytest.raises(StoreUnavailable):
                await migrate(mariadb_url, namespace=namespace)
        for again in (lambda: migrate(mariadb_url, namespace=namespace),
                      lambda: SQLStore.open(mariadb_url, namespace=namespace)):
            with pytest.raises(SchemaMismatch, match="stopped part way") as refused:
                await again()
            assert f"from {BEFORE} to {head()}" in str(refused.value)
            assert "--to base" in str(refused.value)
        assert None is await current_revision(mariadb_url, namespace=namespace)
        assert BEFORE == await migrate(mariadb_url, namespace=namespace, to="base")
        assert None is await migrate(mariadb_url, namespace=namespace)
        await _usable(mariadb_url, namespace)
    finally:
        await drop_namespace(mariadb_url, namespace)
