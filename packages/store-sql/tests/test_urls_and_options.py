"""URLs, options and plugin discovery (no database server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tasks_core import InvalidInput, find_store, open_store
from tasks_store_sql import SQLStore
from tasks_store_sql._dialect import parse_url
from tasks_store_sql.plugin import open_sql


@pytest.mark.parametrize(
    ("url", "driver", "kind"),
    [
        ("sqlite:///tasks.db", "sqlite+aiosqlite", "sqlite"),
        ("sqlite+aiosqlite:////tmp/tasks.db", "sqlite+aiosqlite", "sqlite"),
        ("postgresql://u@h/db", "postgresql+asyncpg", "postgresql"),
        ("postgres://u@h/db", "postgresql+asyncpg", "postgresql"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg", "postgresql"),
        ("mysql://u@h/db", "mysql+asyncmy", "mysql"),
        ("mariadb://u@h/db", "mariadb+asyncmy", "mysql"),
        ("mysql+aiomysql://u@h/db", "mysql+aiomysql", "mysql"),
    ],
)
def test_plain_schemes_map_to_asyncio_drivers(url: str, driver: str, kind: str) -> None:
    """A plain scheme MUST pick the default asyncio driver; an explicit asyncio driver
    MUST be kept."""
    target = parse_url(url)
    assert (driver, kind) == (target.url.drivername, target.kind)


@pytest.mark.parametrize(
    "url",
    ["postgresql+psycopg2://u@h/db", "mysql+pymysql://u@h/db", "sqlite+pysqlite:///x.db"],
)
def test_synchronous_drivers_are_refused(url: str) -> None:
    """A synchronous driver MUST be refused with ``InvalidInput`` naming the asyncio ones."""
    with pytest.raises(InvalidInput, match="not an asyncio driver"):
        parse_url(url)


@pytest.mark.parametrize("url", ["oracle://u@h/db", "tasks.db", "", "sql://"])
def test_urls_of_other_databases_are_refused(url: str) -> None:
    """A URL the SQL store does not serve MUST raise ``InvalidInput`` showing the formats."""
    with pytest.raises(InvalidInput, match="sqlite:///"):
        parse_url(url)


def test_namespace_query_parameter_is_ours_and_never_reaches_the_driver() -> None:
    """``?namespace=`` MUST select the namespace and be removed from the driver URL."""
    target = parse_url("postgresql://u@h/db?namespace=app1&ssl=disable")
    assert ("app1", {"ssl": "disable"}) == (target.namespace, dict(target.url.query))


def test_mysql_urls_default_to_utf8mb4() -> None:
    """MariaDB/MySQL connections MUST use utf8mb4 unless the URL says otherwise."""
    assert "utf8mb4" == parse_url("mysql://u@h/db").url.query["charset"]


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_in_memory_sqlite_is_not_durable(url: str) -> None:
    """An in-memory SQLite store MUST report durable and multi_process off."""
    store = SQLStore(url)
    assert (False, False) == (store.capabilities.durable, store.capabilities.multi_process)


@pytest.mark.parametrize("namespace", ["Upper", "1abc", "a-b", "x" * 31, ""])
def test_bad_namespaces_are_refused(namespace: str) -> None:
    """A namespace becomes part of table names: anything but ``[a-z][a-z0-9_]{0,29}``
    MUST be refused before any I/O."""
    with pytest.raises(InvalidInput, match="namespace"):
        SQLStore("sqlite://", namespace=namespace)


def test_namespace_given_twice_with_two_values_is_refused() -> None:
    """The URL's namespace and the option MUST agree when both are given."""
    with pytest.raises(InvalidInput, match="twice"):
        SQLStore("sqlite://?namespace=a", namespace="b")


@pytest.mark.parametrize(
    "options",
    [{"schema": "guess"}, {"busy_timeout": 0}, {"busy_timeout": True}, {"max_tasks": 0}],
)
def test_bad_options_are_refused(options: dict[str, object]) -> None:
    """Bad option values MUST raise ``InvalidInput`` before any I/O."""
    with pytest.raises(InvalidInput):
        SQLStore("sqlite://", **options)


@pytest.mark.anyio
async def test_unknown_factory_options_are_refused() -> None:
    """The plugin factory MUST refuse options it does not know, naming them."""
    with pytest.raises(InvalidInput, match="colour"):
        await open_sql("sqlite://", colour="blue")


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///x.db",
        "postgresql://h/db",
        "postgres://h/db",
        "mysql://h/db",
        "mariadb://h/db",
        "sql",
    ],
)
def test_every_scheme_finds_the_sql_plugin(url: str) -> None:
    """``find_store`` MUST resolve every scheme the distribution declares to the SQL
    store, naming ``tasks-store-sql``."""
    spec = find_store(url)
    assert ("sql", "tasks-store-sql") == (spec.name, spec.distribution)
    assert spec.capabilities == SQLStore.CAPABILITIES


@pytest.mark.anyio
async def test_open_store_by_url_creates_a_usable_sqlite_file(tmp_path: Path) -> None:
    """``open_store("sqlite:///file")`` MUST create the file and its schema and give an
    empty, durable store."""
    async with open_store(f"sqlite:///{tmp_path}/tasks.db") as store:
        assert isinstance(store, SQLStore)
        assert store.capabilities.durable
        assert [] == await store.reap()
    assert (tmp_path / "tasks.db").exists()
