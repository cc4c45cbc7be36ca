"""Opening a store that cannot be reached as configured: a database that does not exist, a
login the server refuses, a file that is not a SQLite database, options the driver does
not take. Each is one named error, the same kind on every database, before anything is
written; nothing of the driver escapes, and nothing is left running."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url
from tasks_core import InvalidInput, StoreCorrupt, StoreError, StoreUnavailable, open_store
from tasks_store_sql import SQLStore

pytestmark = pytest.mark.anyio

SECRET = "s3cret-Pw"


def _with(url: str, *, database: str | None = None, login: str | None = None) -> str:
    """``url`` with another database, or another login (and the password ``SECRET``)."""
    parsed = make_url(url)
    if database is not None:
        parsed = parsed.set(database=database)
    if login is not None:
        parsed = parsed.set(username=login, password=SECRET)
    return parsed.render_as_string(hide_password=False)


@pytest.fixture(params=["postgres", "psycopg", "mariadb"])
def server_url(request: pytest.FixtureRequest) -> str:
    """Each server database (PostgreSQL by asyncpg and by psycopg)."""
    if request.param == "psycopg":  # its connect errors carry no SQLSTATE
        postgres: str = request.getfixturevalue("postgres_url")
        return make_url(postgres).set(drivername="postgresql+psycopg").render_as_string(False)
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


async def _refusal(url: str) -> StoreUnavailable:
    with pytest.raises(StoreUnavailable) as refused:
        async with open_store(url):
            pass
    return refused.value


async def test_a_database_that_does_not_exist_is_unavailable_on_every_server(
    server_url: str,
) -> None:
    """A URL naming a database the server does not have MUST raise ``StoreUnavailable``
    saying "the database does not exist" in plain words, on PostgreSQL and MariaDB
    alike.

    Troubleshooting: ``_errors.py`` maps PostgreSQL's SQLSTATE class 3D and MariaDB's
    errno 1049 to ``StoreUnavailable`` with a plain reason (``_refusal``); a
    ``StoreError: … refused the operation`` means the mapping lost the SQLSTATE (look at
    ``_sqlstate`` and ``_driver_error`` for the driver's exception chain).
    """
    error = await _refusal(_with(server_url, database="tasks_no_such_db"))
    assert "the database does not exist" in str(error)


async def test_a_refused_login_is_unavailable_on_every_server(server_url: str) -> None:
    """A login the server refuses (an unknown role or user) MUST raise
    ``StoreUnavailable`` saying "the login was refused", on PostgreSQL and MariaDB
    alike, and MUST NOT show the password.

    Troubleshooting: PostgreSQL's SQLSTATE class 28 and MariaDB's errnos
    1044/1045/1698 are connection refusals in ``_errors.py`` (``_REFUSED_STATES``,
    ``_REFUSED_ERRNOS``); MariaDB errors carry a SQLSTATE too, so errnos are looked at
    first.
    """
    error = await _refusal(_with(server_url, login="tasks_no_such_login"))
    assert "the login was refused" in str(error)
    assert SECRET not in str(error)


async def test_a_server_nobody_answers_for_is_unavailable_in_plain_words(
    server_url: str,
) -> None:
    """A URL whose host and port no server answers at MUST raise ``StoreUnavailable``
    saying so in plain words ("cannot be reached"), on PostgreSQL and MariaDB alike
    (not only ``ConnectionRefusedError [111]`` or ``OperationalError [2003]``).

    Troubleshooting: ``_refusal`` in ``_errors.py`` (``_UNREACHABLE``, and MariaDB's
    errnos 2002/2003/2005 in ``_REFUSED_ERRNOS``).
    """
    error = await _refusal(make_url(server_url).set(port=1).render_as_string(False))
    assert "cannot be reached" in str(error)


@pytest.fixture(params=["asyncmy", "aiomysql", "asyncpg", "psycopg"])
def any_driver_url(request: pytest.FixtureRequest) -> Any:
    """The test server's URL on each server driver (SQLAlchemy's ``URL``)."""
    kind = "mariadb" if request.param in ("asyncmy", "aiomysql") else "postgres"
    url = make_url(request.getfixturevalue(f"{kind}_url"))
    return url.set(drivername=f"{url.get_backend_name()}+{request.param}")


@pytest.mark.parametrize("answer", [b"", b"HTTP/1.0 400 Bad Request\r\n\r\n"],
                         ids=["silent", "not-a-database"])
async def test_a_port_where_no_database_answers_is_unavailable(
    any_driver_url: Any, answer: bytes,
) -> None:
    """A port where something accepts the connection and never answers, or answers what
    no database says (another program; PostgreSQL's port in a ``mysql://`` URL), MUST
    raise ``StoreUnavailable`` saying "cannot be reached", on every driver — by the URL's
    ``connect_timeout`` at the latest: the open MUST NOT hang (asyncmy and aiomysql bound
    only the TCP connect with it) nor read "refused the operation: InternalError".

    Troubleshooting: ``_open_mysql`` in ``_dialect.py`` (installed by ``install_connect``)
    bounds the MariaDB/MySQL driver's whole ``connect``; the ``do_connect`` hook turns a
    timeout or a foreign answer into ``_errors.NoServer``.
    """
    reached: list[asyncio.StreamWriter] = []

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.append(writer)  # kept open; written to only when there is an answer
        if answer:
            writer.write(answer)
            await writer.drain()
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = any_driver_url.set(port=server.sockets[0].getsockname()[1])
    try:
        async with asyncio.timeout(60):  # a hang fails here instead of stalling the run
            error = await _refusal(f"{url.render_as_string(False)}?connect_timeout=2")
    finally:
        for writer in reached:
            writer.close()
        server.close()
        await server.wait_closed()
    assert "cannot be reached" in str(error)
    assert reached  # the port was reached: what failed was the answer


async def test_a_server_with_no_connection_slot_left_is_unavailable_in_plain_words(
    postgres_url: str,
) -> None:
    """A PostgreSQL server that refuses a connection for want of a slot
    (``TooManyConnectionsError``, SQLSTATE 53300: ``max_connections`` spent, or a
    connection limit of the role or database) MUST raise ``StoreUnavailable`` saying so in
    plain words — what a worker starting on a full server prints before it exits 2.

    Troubleshooting: ``53300`` is in ``_REFUSED_STATES`` in ``_errors.py`` (the class
    ``53`` stays transient, so it is ``StoreUnavailable``). The test makes the slot run
    out with a role whose connection limit is 0 (``tasks_no_slot``, kept between runs).
    """
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    admin = await asyncpg.connect(postgres_url)
    try:
        await admin.execute(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tasks_no_slot')"
            " THEN CREATE ROLE tasks_no_slot LOGIN; END IF; END $$")
        await admin.execute("ALTER ROLE tasks_no_slot NOSUPERUSER CONNECTION LIMIT 0")
    finally:
        await admin.close()
    error = await _refusal(_with(postgres_url, login="tasks_no_slot"))
    assert str(error) == (
        "PostgreSQL is unavailable: the server has no connection slot left "
        "(max_connections, or a connection limit of the role or database, is reached) "
        "(TooManyConnectionsError [53300])"
    )


@pytest.mark.parametrize("driver", ["postgresql+asyncpg", "postgresql+psycopg"])
async def test_a_database_not_accepting_connections_is_unavailable_in_plain_words(
    postgres_url: str, driver: str
) -> None:
    """A PostgreSQL database that does not accept connections now (``ALLOW_CONNECTIONS
    false``, set while it is renamed, moved or dropped: SQLSTATE 55000) MUST raise
    ``StoreUnavailable`` saying so in plain words: a worker then keeps its finished
    outcomes and retries them, as for any outage, instead of giving them up as refused.

    Troubleshooting: ``55000`` is in ``_REFUSED_STATES`` in ``_errors.py``, and libpq's
    text for it in ``_LIBPQ_WORDS`` (psycopg's connect errors carry no SQLSTATE). The
    database ``tasks_closed`` is kept between runs.
    """
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    admin = await asyncpg.connect(postgres_url)
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = 'tasks_closed'"):
            await admin.execute("CREATE DATABASE tasks_closed")
        await admin.execute("ALTER DATABASE tasks_closed ALLOW_CONNECTIONS false")
    finally:
        await admin.close()
    url = make_url(_with(postgres_url, database="tasks_closed")).set(drivername=driver)
    error = await _refusal(url.render_as_string(hide_password=False))
    assert str(error).startswith(
        "PostgreSQL is unavailable: the database does not accept connections now "
        "(ALLOW_CONNECTIONS is off: it is being renamed, moved or dropped?)")


async def test_a_postgres_refusal_names_the_driver_error_never_the_password(
    postgres_url: str,
) -> None:
    """A PostgreSQL connection refusal MUST name asyncpg's own error class and the
    SQLSTATE (not SQLAlchemy's adapter class ``Error``), and MUST NOT show the URL's
    password (the test server trusts every login, so the password reaches the database
    check).

    Troubleshooting: ``describe`` uses ``_driver_error``: SQLAlchemy's asyncio adapter
    raises an emulated ``Error`` whose ``__cause__`` is the driver's exception; messages
    never include the driver's text or the URL.
    """
    url = _with(postgres_url, database="tasks_no_such_db")
    url = _with(url, login=make_url(postgres_url).username)
    error = await _refusal(url)
    assert str(error) == (
        "PostgreSQL is unavailable: the database does not exist "
        "(InvalidCatalogNameError [3D000])"
    )


async def test_a_file_that_is_not_a_sqlite_database_is_unavailable(tmp_path: Path) -> None:
    """A SQLite URL naming a file that is not a SQLite database MUST raise
    ``StoreUnavailable`` saying "the file is not a SQLite database" (never
    ``StoreCorrupt``, which is about one task record), and MUST leave the file as it was.

    Troubleshooting: ``SQLITE_NOTADB`` (26) is in ``_REFUSED_SQLITE`` in ``_errors.py``;
    the error comes from the first statement (the WAL pragma), after SQLite opened the
    file.
    """
    path = tmp_path / "notes.txt"
    path.write_text("root:x:0:0:root:/root:/bin/bash\n" * 100)
    before = path.read_bytes()
    error = await _refusal(f"sqlite:///{path}")
    assert not isinstance(error, StoreCorrupt)
    assert "the file is not a SQLite database" in str(error)
    assert before == path.read_bytes()


async def test_a_sqlite_file_in_a_missing_directory_is_unavailable(tmp_path: Path) -> None:
    """A SQLite file whose directory does not exist MUST raise ``StoreUnavailable``
    saying that the file cannot be opened, and MUST NOT create anything.

    Troubleshooting: ``SQLITE_CANTOPEN`` (14) in ``_REFUSED_SQLITE``.
    """
    error = await _refusal(f"sqlite:///{tmp_path}/missing/tasks.db")
    assert "cannot be opened" in str(error)
    assert [] == os.listdir(tmp_path)


async def test_a_sqlite_path_that_is_a_directory_reads_so(tmp_path: Path) -> None:
    """A SQLite URL naming a directory MUST raise ``StoreUnavailable`` whose words name
    that case too (an operator read "is its directory there and writable?" and looked at
    the wrong thing), and MUST NOT create anything in it.

    Troubleshooting: ``SQLITE_CANTOPEN`` (14) in ``_REFUSED_SQLITE``.
    """
    (tmp_path / "adir").mkdir()
    error = await _refusal(f"sqlite:///{tmp_path}/adir")
    assert "cannot be opened (a directory" in str(error)
    assert [] == os.listdir(tmp_path / "adir")


def test_a_failed_sqlite_open_leaves_no_thread_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When opening a SQLite file fails, the driver's connection thread MUST have ended
    by the time the error is raised, so that nothing reports to the event loop after
    ``asyncio.run`` closed it (the CLI printed "Exception in thread … RuntimeError:
    Event loop is closed" after the right error, about one run in four).

    Troubleshooting: aiosqlite stops the thread of a connection that failed to open
    without waiting for it; ``_open_aiosqlite`` in ``_dialect.py`` (installed as the
    engine's ``do_connect``) waits for that thread before re-raising.
    """
    reported: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", reported.append)
    before = set(threading.enumerate())

    def workers() -> list[threading.Thread]:
        return [
            thread
            for thread in threading.enumerate()
            if thread not in before and "_connection_worker_thread" in thread.name
        ]

    async def open_twice() -> list[threading.Thread]:
        for _ in range(2):  # the store connects again after the first failure
            with pytest.raises(StoreUnavailable):
                await SQLStore.open(f"sqlite:///{tmp_path}/missing/tasks.db")
        return [thread for thread in workers() if thread.is_alive()]

    alive = asyncio.run(open_twice())
    for thread in workers():
        thread.join()  # (their last report, if any, went to the closed loop by now)
    assert ([], []) == (alive, reported)


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "mariadb"])
async def test_a_connect_argument_the_driver_refuses_is_invalid_input(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A ``connect_args`` keyword the driver's ``connect`` does not take MUST raise
    ``InvalidInput`` naming it (not a raw ``TypeError`` from the first connect).

    Troubleshooting: the engine's ``do_connect`` (``install_connect`` in
    ``_dialect.py``) wraps the driver's connect call in ``connect_arguments``
    (``_errors.py``), which turns the driver refusing its arguments into
    ``InvalidInput``; only that call is wrapped.
    """
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path}/tasks.db"
    else:
        url = request.getfixturevalue(f"{kind}_url")
    options = {"connect_args": {"tasks_bogus_option": 1}}
    with pytest.raises(InvalidInput, match="tasks_bogus_option"):
        await SQLStore.open(url, engine_options=options)


@pytest.mark.parametrize(
    "query",
    [
        "sslmode=disable&connect_timeout=5",
        "ssl=prefer&timeout=5&command_timeout=30",
        "prepared_statement_cache_size=50&statement_cache_size=10&direct_tls=false",
    ],
)
async def test_query_options_work_on_asyncpg_for_the_pool_and_the_wakeups(
    postgres_url: str, query: str
) -> None:
    """``?sslmode=`` and ``?connect_timeout=`` (libpq's spelling, in most copied
    PostgreSQL URLs) MUST work on asyncpg as asyncpg's own ``ssl``/``timeout`` do, and
    every accepted option MUST work for the store's pool and its wakeup connection alike.

    Troubleshooting: ``parse_url`` translates them (``_ASYNCPG_ALIASES``) and
    ``driver_params`` turns the URL's text into the numbers asyncpg needs; the wakeup
    connector (``_wakeups.asyncpg_connector``) must apply ``driver_params`` too, and drop
    the options only SQLAlchemy's adapter takes (``_SQLALCHEMY_ONLY``).
    """
    store = await SQLStore.open(f"{postgres_url}?{query}", namespace="opts", schema="upgrade")
    try:
        assert [] == await store.reap()
        assert await store.wait_for_work(["q"], 0) is False  # the LISTEN side
    finally:
        await store.aclose()


_WEAK = "tasks_weak"
"""A login the privilege tests make (kept between runs), granted only what a test says."""


async def _grant_only_dml(kind: str, admin_url: str, namespace: str) -> str:
    """The URL of :data:`_WEAK` on ``admin_url``'s database, which may read and write its
    tables — those of ``namespace``, migrated here first, among them — and create nothing
    (literal statements: no SQL is built from values, even here)."""
    from tasks_store_sql import migrate

    await migrate(admin_url, namespace=namespace)
    url = make_url(admin_url)
    if kind == "postgres":
        import asyncpg  # type: ignore[import-untyped,unused-ignore]

        admin = await asyncpg.connect(admin_url.replace("+asyncpg", ""))
        try:
            await admin.execute(
                "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tasks_weak')"
                " THEN CREATE ROLE tasks_weak LOGIN; END IF; END $$")
            await admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "
                                "public TO tasks_weak")
        finally:
            await admin.close()
    else:
        import asyncmy  # type: ignore[import-untyped,unused-ignore]

        admin = await asyncmy.connect(host=url.host, port=url.port or 3306, db=url.database,
                                      user=url.username, password=url.password or "")
        try:
            async with admin.cursor() as cursor:
                await cursor.execute("CREATE USER IF NOT EXISTS tasks_weak")
                # ``ON *``: the connection's database
                await cursor.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON * TO tasks_weak")
        finally:
            admin.close()
    return url.set(username=_WEAK, password=None).render_as_string(False)


_DRIVERS = {"asyncpg": "postgres", "psycopg": "postgres", "asyncmy": "mariadb",
            "aiomysql": "mariadb"}
"""Each driver the store speaks, and its server."""


@pytest.fixture(params=sorted(_DRIVERS))
def admin(request: pytest.FixtureRequest) -> tuple[str, str, str]:
    """Each server, its test URL (a login that may do anything), and a driver of it."""
    kind = _DRIVERS[request.param]
    return kind, request.getfixturevalue(f"{kind}_url"), request.param


async def test_a_login_without_a_privilege_reads_so_and_one_with_dml_runs_tasks(
    admin: tuple[str, str, str],
) -> None:
    """A login that may read and write the tables and create nothing (what
    docs/postgresql-workers.md asks of an application's login) MUST run tasks there; the
    same login making the tables of another namespace MUST raise ``StoreError`` saying
    "the login lacks a privilege" (not only ``InsufficientPrivilegeError [42501]``), before
    anything is written.

    Troubleshooting: ``_denial`` in ``_errors.py`` (``_DENIED_STATES``, MariaDB's errnos
    1142/1143/1227 in ``_DENIED_ERRNOS``); not transient: a grant is needed, not a retry.
    """
    from tasks_core import App, Owner, Worker
    from tasks_store_sql.plugin import drop_namespace

    kind, admin_url, driver = admin
    namespace, other = (f"weak_{os.urandom(3).hex()}" for _ in range(2))
    try:
        weak = make_url(await _grant_only_dml(kind, admin_url, namespace))
        weak_url = weak.set(drivername=f"{weak.get_backend_name()}+{driver}").render_as_string(
            False)
        app = App(weak_url, store_options={"namespace": namespace})

        @app.task()
        async def echo(ctx: Any, text: str) -> str:
            ctx.progress(50, "half way")
            return text

        owner = Owner("alice")
        try:
            submitted = await app.submit(echo, {"text": "hi"}, owner)
            worker = Worker(app, concurrency=1)
            running = asyncio.create_task(worker.run())
            done = await app.wait(submitted.id, owner, timeout=60)
            await worker.shutdown()
            await running
        finally:
            await app.aclose()
        assert (done.status, done.result) == ("completed", "hi")
        with pytest.raises(StoreError) as refused:
            await SQLStore.open(weak_url, namespace=other)
        assert not isinstance(refused.value, StoreUnavailable)
        assert "the login lacks a privilege this needs" in str(refused.value)
    finally:
        await drop_namespace(admin_url, namespace)
        await drop_namespace(admin_url, other)


async def test_a_read_only_sqlite_file_reads_so(tmp_path: Path) -> None:
    """A write to a SQLite file opened read-only (``?mode=ro&uri=true``, or a file this
    process may not write) MUST raise ``StoreError`` saying the file is read-only here,
    not only ``OperationalError [SQLITE_READONLY]``.

    Troubleshooting: SQLite's primary code 8 in ``_DENIED_SQLITE`` (``_errors.py``).
    """
    from tasks_core import Owner
    from tasks_core.models import NewTask, Work

    path = tmp_path / "tasks.db"
    async with open_store(f"sqlite:///{path}"):
        pass
    store = await SQLStore.open(f"sqlite:///file:{path}?mode=ro&uri=true")
    try:
        with pytest.raises(StoreError) as refused:
            await store.create(NewTask(id="t1", work=Work(name="noop"),
                                       owner=Owner("alice"), tenant="default"))
    finally:
        await store.aclose()
    assert "read-only here" in str(refused.value)
