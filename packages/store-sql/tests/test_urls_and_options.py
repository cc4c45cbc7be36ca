"""URLs, options and plugin discovery (no database server needed)."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from tasks_core import InvalidInput, SchemaMismatch, UnknownStore, find_store, open_store
from tasks_store_sql import SQLStore, migrate
from tasks_store_sql._url import parse_url
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


@pytest.mark.parametrize("url", ["mysql://root@127.0.0.1", "mysql+aiomysql://root@h/",
                                 "mariadb://u:pw@h:3306/?namespace=a"])
def test_a_mariadb_url_without_its_database_is_refused(url: str) -> None:
    """A MariaDB/MySQL URL that names no database MUST be refused with ``InvalidInput``
    showing the form — every command crashed with SQLAlchemy's bare ``AssertionError``."""
    with pytest.raises(InvalidInput, match=r"names its database: mysql://user@host/dbname"):
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


@pytest.mark.parametrize("namespace",
                         ["Upper", "1abc", "a-b", "x" * 31, "", "sqlite", "sqlite_x"])
def test_bad_namespaces_are_refused(namespace: str) -> None:
    """A namespace becomes part of table names: anything but ``[a-z][a-z0-9_]{0,29}``
    MUST be refused before any I/O."""
    with pytest.raises(InvalidInput, match="namespace"):
        SQLStore("sqlite://", namespace=namespace)


@pytest.mark.anyio
async def test_a_namespace_that_only_begins_like_sqlite_works_on_sqlite(
    tmp_path: Path,
) -> None:
    """Only ``sqlite`` and ``sqlite_…`` are reserved: ``sqlitex`` MUST open, and a refused
    namespace MUST write nothing (no file)."""
    with pytest.raises(InvalidInput, match="reserves"):
        await SQLStore.open(f"sqlite:///{tmp_path}/refused.db", namespace="sqlite")
    assert not (tmp_path / "refused.db").exists()
    store = await SQLStore.open(f"sqlite:///{tmp_path}/ok.db", namespace="sqlitex")
    await store.aclose()


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
@pytest.mark.parametrize("schema", ["create", "upgrade", "check"])
async def test_create_false_runs_no_ddl_whatever_the_schema_mode(
    schema: str, tmp_path: Path
) -> None:
    """``create=False`` forbids what ``schema`` allows: an empty SQLite file, or another
    program's database, opened with it MUST be refused (``SchemaMismatch``) and left
    byte for byte as it was — no table, and its journal mode not switched to WAL — in
    every schema mode."""
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as made:
        made.execute("CREATE TABLE notes (body TEXT)")
        made.execute("INSERT INTO notes VALUES ('kept')")
        made.commit()
    for path in (empty, other):
        before = path.read_bytes()
        with pytest.raises(SchemaMismatch, match="no tasks schema"):
            await open_store(f"sqlite:///{path}", create=False, schema=schema)
        assert before == path.read_bytes()
        assert sorted(os.listdir(tmp_path)) == ["empty.db", "other.db"]


@pytest.mark.anyio
async def test_create_false_never_makes_a_sqlite_file(tmp_path: Path) -> None:
    """With ``create=False`` a SQLite file that does not exist MUST be ``UnknownStore``
    naming it, and stay missing (connecting would have made it)."""
    path = tmp_path / "missing.db"
    with pytest.raises(UnknownStore, match=re.escape(str(path))):
        await open_store(f"sqlite:///{path}", create=False)
    assert [] == os.listdir(tmp_path)


@pytest.mark.anyio
async def test_unknown_factory_options_are_refused() -> None:
    """The plugin factory, ``SQLStore(...)``, ``SQLStore.open`` and ``migrate`` MUST refuse
    options they do not know with ``InvalidInput`` naming them (the class refused with a
    ``TypeError`` naming an internal base class)."""
    with pytest.raises(InvalidInput, match="colour"):
        await open_sql("sqlite://", colour="blue")
    with pytest.raises(InvalidInput, match=r"Unknown SQLStore option.*frobnicate"):
        SQLStore("sqlite://", frobnicate=1)
    with pytest.raises(InvalidInput, match=r"Unknown SQLStore option.*frobnicate"):
        await SQLStore.open("sqlite://", frobnicate=1)
    with pytest.raises(InvalidInput, match=r"Unknown SQLStore option.*frobnicate"):
        await migrate("sqlite://", frobnicate=1)


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


@pytest.mark.anyio
@pytest.mark.parametrize("spelled", ["file:{path}", "file://{path}", "file://localhost{path}"])
async def test_a_sqlite_uri_opens_the_file_it_names(tmp_path: Path, spelled: str) -> None:
    """A SQLite URI (``sqlite:///file:PATH?mode=ro&uri=true``) MUST open the file it
    names, read only with ``mode=ro``: the tasks written before are read, a write is
    refused and no other file appears; the store's writer queue and change watcher key on
    that same file.

    Troubleshooting: ``Target.sqlite_path`` and ``sqlite_file`` (``_dialect.py``,
    ``_base.py``) must strip the URI's ``file:`` and authority.
    """
    from tasks_core.errors import StoreError
    from tasks_core.models import NewTask, TaskQuery, Work
    from tasks_store_sql._base import sqlite_file

    path = tmp_path / "tasks.db"
    async with open_store(f"sqlite:///{path}") as store:
        await store.create(NewTask(id="t1", tenant="default", owner=None,
                                   work=Work(name="job")))
    url = "sqlite:///" + spelled.format(path=path) + "?mode=ro&uri=true"
    async with open_store(url) as store:
        assert isinstance(store, SQLStore)
        assert str(path) == sqlite_file(store.engine) == parse_url(url).sqlite_path
        assert ["t1"] == [task.id for task in await store.list(TaskQuery(tenant=None))]
        with pytest.raises(StoreError):  # SQLite refuses the write (read-only)
            await store.create(NewTask(id="t2", tenant="default", owner=None,
                                       work=Work(name="job")))
    assert set(os.listdir(tmp_path)) <= {"tasks.db", "tasks.db-wal", "tasks.db-shm"}


SECRET = "s3cret-Pw"


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://postgres:{SECRET}@127.0.0.1:notaport/x",
        f"postgres://postgres:{SECRET}@[::1:5432/x",
        f"postgresql://postgres:{SECRET}@127.0.0.1:99999/x",
        f"postgresql://postgres:{SECRET}@127.0.0.1:0/x",
        f"mysql://root:{SECRET}@127.0.0.1:5432:5432/x",
        f"mysql://root:{SECRET}@127.0.0.1:/x",
        f"postgresql://postgres:{SECRET}@h/db?host=a:1&host=b",
        f"sqlite://user:{SECRET}@host/x.db",
    ],
)
def test_malformed_urls_are_invalid_input_without_the_password(url: str) -> None:
    """A URL that cannot be parsed or used (a port that is not a number from 1 to 65535,
    an unclosed IPv6 bracket, hosts without ports, a SQLite URL with a login) MUST raise
    ``InvalidInput`` before anything connects, never ``ValueError``/``OverflowError``,
    and the message MUST NOT show the password.

    Troubleshooting: ``_parts`` in ``_dialect.py`` catches what ``make_url`` raises and
    checks the port range; ``parse_url`` runs the dialect's ``create_connect_args`` once
    to catch what SQLAlchemy would refuse at the first connect. Messages never quote the
    URL.
    """
    with pytest.raises(InvalidInput) as refused:
        SQLStore(url)
    assert SECRET not in str(refused.value)


def test_the_cli_reports_a_malformed_url_in_one_line() -> None:
    """``tasks ls --system --store <malformed URL>`` MUST exit 2 with one
    ``error: InvalidInput`` line on stderr (no traceback) that does not show the
    password.

    Troubleshooting: a traceback means an exception other than a ``TasksError`` escaped
    ``parse_url`` (see the test above).
    """
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:notaport/x"
    script = "import sys; from tasks_core.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", script, "ls", "--system", "--store", url],
        capture_output=True, text=True, timeout=120, check=False,
    )
    lines = done.stderr.strip().splitlines()
    assert (2, 1) == (done.returncode, len(lines)), done.stderr
    assert lines[0].startswith("error: InvalidInput: ")
    assert SECRET not in done.stderr


@pytest.mark.parametrize(
    ("url", "query"),
    [
        ("postgresql://u@h/db?sslmode=require", {"ssl": "require"}),
        ("postgresql://u@h/db?connect_timeout=5", {"timeout": "5"}),
        (
            "postgresql://u@h/db?sslmode=verify-full&connect_timeout=2.5&namespace=a1",
            {"ssl": "verify-full", "timeout": "2.5"},
        ),
        ("postgresql://u@h/db?ssl=disable&command_timeout=30", {"ssl": "disable",
                                                               "command_timeout": "30"}),
        ("postgresql+psycopg://u@h/db?sslmode=require&connect_timeout=5",
         {"sslmode": "require", "connect_timeout": "5"}),
        ("mysql://u@h/db?connect_timeout=5&ssl_ca=/ca.pem",
         {"connect_timeout": "5", "ssl_ca": "/ca.pem", "charset": "utf8mb4"}),
        ("sqlite:///file:x.db?mode=ro&uri=true", {"mode": "ro", "uri": "true"}),
    ],
)
def test_driver_query_options_are_kept_or_translated(url: str, query: dict[str, str]) -> None:
    """Query options the driver takes MUST reach it; on asyncpg, libpq's ``sslmode`` and
    ``connect_timeout`` MUST become asyncpg's ``ssl`` and ``timeout`` (psycopg takes
    libpq's spelling as it is).

    Troubleshooting: ``QUERY_OPTIONS`` and ``_ASYNCPG_ALIASES`` in ``_dialect.py``;
    ``driver_params`` turns the text into asyncpg's numbers at connect time.
    """
    assert query == dict(parse_url(url).url.query)


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("postgresql://u@h/db?foo=bar", "'foo'"),
        ("postgresql://u@h/db?application_name=x", "'application_name'"),
        ("mysql://u@h/db?foo=bar", "'foo'"),
        ("mysql://u@h/db?write_timeout=5", "'write_timeout'"),
        ("mysql+aiomysql://u@h/db?read_timeout=5", "'read_timeout'"),
        ("sqlite:///x.db?foo=bar", "'foo'"),
    ],
)
def test_query_options_the_driver_does_not_take_are_refused(url: str, named: str) -> None:
    """A query option the driver's ``connect`` (or SQLAlchemy's dialect for it) does not
    take MUST raise ``InvalidInput`` when the URL is parsed, naming the option and
    listing the accepted ones (never a ``TypeError`` at the first connect, never an
    option silently ignored).

    Troubleshooting: ``_check_query`` in ``_dialect.py``; the accepted set of each driver
    is ``QUERY_OPTIONS``.
    """
    with pytest.raises(InvalidInput, match=f"{named}; it takes: .*namespace") as refused:
        parse_url(url)
    assert "does not take the URL query option" in str(refused.value)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("sqlite:///x.db?mode=ro", "sqlite:///file:PATH"),
        ("sqlite:///x.db?mode=ro&uri=true", "a SQLite URI"),
        ("sqlite:///file::memory:?uri=true", "sqlite://"),
        ("sqlite:///x.db?namespace=", "'namespace' has no value"),
        ("postgresql://u@h/db?sslmode=", "'sslmode' has no value"),
        ("sqlite:///x.db?timeout=3", r"SQLStore.open\(url, busy_timeout=...\), not of the URL"),
        ("sqlite:///x.db?isolation_level=DEFERRED", "transactions"),
        ("sqlite:///x.db?uri=true&mode=memory", "one of ro, rw, rwc"),
        ("postgresql://u@h/db?sslmode=requir", "one of disable, allow, prefer"),
        ("postgresql://u@h/db?connect_timeout=soon", "'connect_timeout' has a value"),
        ("postgresql://u@h/db?connect_timeout=-1", "'connect_timeout' has a value"),
        ("postgresql://u@h/db?command_timeout=1e308", "'command_timeout' has a value"),
        ("mysql://u@h/db?connect_timeout=0", "'connect_timeout' has a value"),
        ("mysql://u@h/db?connect_timeout=99999999999", "'connect_timeout' has a value"),
        ("mysql://u@h/db?read_timeout=0", "'read_timeout' has a value"),
        ("postgresql://u@h/db?sslmode=require&ssl=disable", "'sslmode' and 'ssl'"),
        ("mysql://u@h/db?connect_timeout=5&connect_timeout=6", "more than once"),
        ("sqlite:///x.db?namespace=a&namespace=b", "more than once"),
    ],
)
def test_unusable_query_option_values_are_refused(url: str, said: str) -> None:
    """A query option the store cannot honour as given (a SQLite URI parameter without
    ``uri=true``, ``uri=true`` with a path that is not a SQLite ``file:`` URI — SQLite
    would open a file named ``x.db?mode=ro`` —, an option the store sets itself, a value
    the driver cannot use, an option without a value, which SQLAlchemy would drop, one
    option given twice) MUST raise ``InvalidInput`` saying why, before anything
    connects.

    Troubleshooting: ``_check_query`` and the option checks (``_choice``, ``_seconds``…)
    in ``_dialect.py``.
    """
    with pytest.raises(InvalidInput, match=said):
        parse_url(url)


@pytest.mark.anyio
async def test_aiomysql_with_a_pymysql_it_cannot_use_is_refused_at_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``mysql+aiomysql://`` with a PyMySQL that aiomysql cannot use (1.2.1 and later:
    ``escape_bytes_prefixed`` gone, or bound to a string as 1.2.4 does) MUST be refused
    with ``InvalidInput`` naming the extra to install when the store opens — never a
    ``TypeError`` from the driver at its first query.

    Troubleshooting: ``_check_aiomysql`` in ``_dialect.py``.
    """
    converters = pytest.importorskip("pymysql.converters")
    pytest.importorskip("aiomysql")
    monkeypatch.setattr(converters, "escape_bytes_prefixed", "DO NOT IMPORT THIS!!!")
    with pytest.raises(InvalidInput, match=r"^aiomysql cannot work with the installed PyMySQL "
                       r"\(1.2.1 or later\).*\[aiomysql\]"):  # not blamed on engine_options
        await SQLStore.open("mysql+aiomysql://root@127.0.0.1:9/nowhere")  # never reached


@pytest.mark.anyio
async def test_a_missing_driver_is_refused_naming_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A URL whose driver is not installed MUST be refused with ``InvalidInput`` naming
    the extra of tasks-store-sql that brings it (and how to install it from a clone),
    before anything connects.

    Troubleshooting: ``_install_hint`` and ``_EXTRAS`` in ``_dialect.py``.
    """
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if it were not installed
    with pytest.raises(InvalidInput, match=r"psycopg driver is not installed") as refused:
        await SQLStore.open("postgresql+psycopg://u@127.0.0.1:9/nowhere")  # never reached
    assert "pip install 'tasks-store-sql[psycopg]'" in str(refused.value)
    assert "pip install './packages/store-sql[psycopg]'" in str(refused.value)


@pytest.mark.parametrize("busy_timeout", [0, -1, 3601, float("inf"), float("nan"), True, "5",
                                          timedelta(seconds=-1), timedelta(hours=1, seconds=1)])
def test_a_busy_timeout_that_is_not_a_real_number_in_range_is_refused(
    busy_timeout: object,
) -> None:
    """``busy_timeout`` goes through ``tasks_core.durations``: a real number of seconds in
    (0, 3600], else ``InvalidInput`` naming it, before anything is opened."""
    with pytest.raises(InvalidInput, match="busy_timeout"):
        SQLStore("sqlite://", busy_timeout=busy_timeout)  # type: ignore[arg-type]


@pytest.mark.parametrize("busy_timeout", [3600, timedelta(hours=1)])
def test_a_busy_timeout_at_its_limit_is_taken(busy_timeout: object) -> None:
    """Its cap, as seconds or as a ``timedelta``."""
    assert SQLStore("sqlite://", busy_timeout=busy_timeout) is not None  # type: ignore[arg-type]


@pytest.mark.parametrize(("options", "said"), [
    ({"pool_size": float("nan")}, "pool_size must be an integer in 1..1000, not the float nan"),
    ({"pool_size": True}, "pool_size must be an integer"),
    ({"max_overflow": -1}, "max_overflow must be an integer in 0..1000"),
    ({"pool_timeout": float("inf")}, "pool_timeout must be a finite number"),
    ({"no_such_option": 1}, "SQLAlchemy cannot take"),
    (5, "must be a dict"),
])
@pytest.mark.parametrize("url", ["sqlite:///never.db", "postgresql://u@h/db", "mysql://u@h/db"])
def test_engine_options_sqlalchemy_or_the_pool_cannot_use_are_refused(
    url: str, options: object, said: str
) -> None:
    """``engine_options``' pool numbers are sizes and durations like every other — checked
    when the store is made, not when the pool first grows — and an option SQLAlchemy
    refuses is ``InvalidInput``, not its ``TypeError``/``ValueError``."""
    with pytest.raises(InvalidInput, match=said):
        SQLStore(url, engine_options=options)  # type: ignore[arg-type]


def test_a_driver_timeout_cannot_replace_the_busy_timeout() -> None:
    """``engine_options={"connect_args": {"timeout": …}}`` would pass an unchecked value
    (NaN, an infinity) for the wait ``busy_timeout`` sets: refused as ``?timeout=`` is."""
    with pytest.raises(InvalidInput, match="busy_timeout"):
        SQLStore("sqlite://", engine_options={"connect_args": {"timeout": float("nan")}})
