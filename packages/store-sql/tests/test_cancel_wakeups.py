"""Cancel wakeups across clients: a cancel committed through another engine (another
machine), another driver or another process reaches ``wait_for_cancels``.

PostgreSQL: ``NOTIFY`` on the cancel channel from every path a cancel takes — the asyncpg
fast path for one transition and for ``transition_many`` batches (next to completions the
one-statement path writes), and the SQLAlchemy path of a psycopg client — and the status
read once per listening connection, for cancels committed before it listened. SQLite
file: the watched ids' status, read when a wait begins and whenever the file changes.

No sleep stands in for "the waiter is listening": a first ``wait_for_cancels`` returns
only once the store listens, a cancel no waiter held is kept for the next wait, and a
SQLite wait reads the status when it begins.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import AsyncIterator, Collection
from pathlib import Path

import pytest
import sqlalchemy as sa
from tasks_core import (
    Access,
    Cancelled,
    Completed,
    Lease,
    NewTask,
    Owner,
    TasksError,
    Transition,
    Work,
)
from tasks_store_sql import PostgresStore, SQLStore
from tasks_store_sql._wakeups import UNREPORTED, Listener

pytestmark = pytest.mark.anyio

ALICE = Owner("alice")
OWNER = Access(principal=ALICE, visibility="watchers")
WAIT = 10.0
NAMESPACE = "cancelwake"


def _new(task_id: str) -> NewTask:
    return NewTask(id=task_id, tenant="default", owner=ALICE, work=Work(name="j"))


async def _claimed(store: SQLStore, *ids: str) -> None:
    for task_id in ids:
        await store.create(_new(task_id))
        await store.claim(task_id, "w1", 60)


async def _cancel(store: SQLStore, task_id: str) -> None:
    current = await store.get(task_id, tenant=None)
    done = await store.transition(task_id, current.revision, Cancelled(event_id="c"), OWNER)
    assert "applied" == done.outcome, done


async def _reported(
    store: SQLStore, watched: Collection[str], expected: set[str]
) -> set[str]:
    """Wait until ``expected`` was reported (a wait may report some of it at a time);
    everything reported."""
    seen: set[str] = set()
    while not expected <= seen:
        got = await store.wait_for_cancels(watched, WAIT)
        assert got, f"timed out with {sorted(expected - seen)} unreported"
        seen |= got
    return seen


async def _emptied(store: SQLStore) -> None:
    async with store.engine.begin() as conn:
        for table in (store.tables.events, store.tables.members, store.tables.tasks):
            await conn.execute(sa.delete(table))
        await conn.execute(sa.update(store.tables.locks).values(value=0))


@pytest.fixture
async def pair(postgres_url: str) -> AsyncIterator[tuple[SQLStore, SQLStore]]:
    """A waiting store and a cancelling store on separate asyncpg engines, one
    namespace."""
    waiter = await SQLStore.open(postgres_url, namespace=NAMESPACE, schema="upgrade")
    writer = await SQLStore.open(postgres_url, namespace=NAMESPACE, schema="upgrade")
    await _emptied(writer)
    yield waiter, writer
    await writer.aclose()
    await waiter.aclose()


# -- PostgreSQL -------------------------------------------------------------------------


async def test_a_cancel_through_another_engine_reaches_a_waiter(
    pair: tuple[SQLStore, SQLStore],
) -> None:
    """A cancel committed through another engine (the asyncpg fast path) MUST be
    reported to a worker waiting on that task."""
    waiter, writer = pair
    assert isinstance(writer, PostgresStore)  # the hot path writes the cancel
    await _claimed(writer, "t1")
    assert set() == await waiter.wait_for_cancels(set(), 0)  # listening from here on
    waiting = asyncio.ensure_future(waiter.wait_for_cancels({"t1"}, WAIT))
    await asyncio.sleep(0)
    await _cancel(writer, "t1")
    assert {"t1"} == await asyncio.wait_for(waiting, WAIT)


async def test_a_cancel_before_the_store_listened_is_reported_by_its_first_wait(
    pair: tuple[SQLStore, SQLStore],
) -> None:
    """A cancel committed before the waiter's store listened (a worker that claimed and
    was cancelled while its first wait still connected) MUST be reported by the first
    wait that holds the id: no notification could tell it."""
    waiter, writer = pair
    await _claimed(writer, "t1", "t2")
    await _cancel(writer, "t1")
    assert {"t1"} == await waiter.wait_for_cancels({"t1", "t2"}, WAIT)


async def test_cancels_of_a_batch_reach_a_waiter_and_completions_do_not(
    pair: tuple[SQLStore, SQLStore],
) -> None:
    """Cancels applied by ``transition_many`` — a batch that also completes claimed runs
    (the one-statement completions) and cancels an unwatched task — MUST each be
    reported to the waiter watching them, and nothing else."""
    waiter, writer = pair
    cancel, complete = ["c1", "c2", "c3"], ["d1", "d2"]
    await _claimed(writer, *cancel, "other")
    items: list[tuple[str, int, Cancelled | Completed, Lease | Access]] = []
    for task_id in complete:  # runs this store claimed: the completions' statement
        await writer.create(_new(task_id))
        claim = await writer.claim(task_id, "w1", 60)
        items.append((task_id, claim.snapshot.revision, Completed(event_id="d"),
                      claim.lease))
    for task_id in [*cancel, "other"]:
        current = await writer.get(task_id, tenant=None)
        items.append((task_id, current.revision, Cancelled(event_id="c"), OWNER))
    assert set() == await waiter.wait_for_cancels(set(), 0)  # listening from here on
    results = await writer.transition_many(items)
    assert all(isinstance(r, Transition) and r.outcome == "applied" for r in results), \
        [r for r in results if isinstance(r, TasksError)]
    watched = {*cancel, *complete}
    assert set(cancel) == await _reported(waiter, watched, set(cancel))
    assert set() == await waiter.wait_for_cancels(watched, 0.2)


async def test_a_cancel_through_psycopg_reaches_an_asyncpg_waiter(
    postgres_url: str, pair: tuple[SQLStore, SQLStore],
) -> None:
    """A cancel made by a client on psycopg (the SQLAlchemy path, which listens to
    nothing itself) MUST still notify: workers on asyncpg wait for it."""
    pytest.importorskip("psycopg")
    waiter, _ = pair
    url = sa.make_url(postgres_url).set(drivername="postgresql+psycopg")
    psycopg = await SQLStore.open(url.render_as_string(hide_password=False),
                                  namespace=NAMESPACE)
    try:
        assert not isinstance(psycopg, PostgresStore)
        assert not psycopg.capabilities.cancel_wakeups
        await _claimed(psycopg, "t1", "t2")
        assert set() == await waiter.wait_for_cancels(set(), 0)
        await _cancel(psycopg, "t1")
        current = await psycopg.get("t2", tenant=None)
        [done] = await psycopg.transition_many(
            [("t2", current.revision, Cancelled(event_id="c"), OWNER)])
        assert isinstance(done, Transition)
        assert "applied" == done.outcome
        assert {"t1", "t2"} == await _reported(waiter, {"t1", "t2"}, {"t1", "t2"})
    finally:
        await psycopg.aclose()


async def test_a_cancel_in_another_namespace_is_not_reported(
    postgres_url: str, pair: tuple[SQLStore, SQLStore],
) -> None:
    """Each namespace has its own cancel channel: a cancel of a task with the same id in
    another namespace MUST NOT be reported."""
    waiter, writer = pair
    other = await SQLStore.open(postgres_url, namespace=NAMESPACE + "_b", schema="upgrade")
    try:
        await _emptied(other)
        await _claimed(other, "t1")
        await _claimed(writer, "marker")
        assert set() == await waiter.wait_for_cancels(set(), 0)
        await _cancel(other, "t1")
        await _cancel(writer, "marker")  # notifications of one namespace keep their order
        assert {"marker"} == await waiter.wait_for_cancels({"marker"}, WAIT)
        assert set() == await waiter.wait_for_cancels({"t1"}, 0.2)
    finally:
        await other.aclose()


async def test_a_lost_listening_connection_answers_cancel_waiters_and_reconnects(
    pair: tuple[SQLStore, SQLStore],
) -> None:
    """When the listening connection is killed, cancel waiters MUST return (empty: the
    heartbeat still sees the cancel), and the next wait MUST listen again and report a
    cancel made while nothing listened."""
    waiter, writer = pair
    await _claimed(writer, "t1")
    assert set() == await waiter.wait_for_cancels(set(), 0)
    listener = waiter._listener()
    waiting = asyncio.ensure_future(waiter.wait_for_cancels({"t1"}, WAIT))
    for _ in range(int(WAIT * 1000)):  # until it waits on the connection (bounded)
        if listener._cancel_waiters:
            break
        await asyncio.sleep(0.001)
    assert listener._cancel_waiters
    pid = listener._driver.get_server_pid()
    async with writer.engine.begin() as conn:
        await conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    assert set() == await asyncio.wait_for(waiting, WAIT)
    await _cancel(writer, "t1")  # nothing listens now
    assert {"t1"} == await waiter.wait_for_cancels({"t1"}, WAIT)


@pytest.mark.parametrize("database", ["postgres", "sqlite"])
async def test_a_closed_store_ends_cancel_waits_and_opens_nothing(
    database: str, postgres_url: str, tmp_path: Path,
) -> None:
    """``aclose`` MUST end a cancel wait in progress (nothing), and a wait begun after it
    MUST open nothing (nothing would close it) and return nothing at its timeout — not
    at once, where a caller's loop would spin and starve its event loop."""
    url = postgres_url if database == "postgres" else f"sqlite:///{tmp_path}/closed.db"
    store = await SQLStore.open(url, namespace=NAMESPACE, schema="upgrade")
    assert set() == await store.wait_for_cancels(set(), 0)
    waiting = asyncio.ensure_future(store.wait_for_cancels({"absent"}, WAIT))
    await asyncio.sleep(0)
    await store.aclose()
    assert set() == await asyncio.wait_for(waiting, WAIT / 2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert set() == await asyncio.wait_for(store.wait_for_cancels({"absent"}, 0.05),
                                          WAIT / 2)
    assert loop.time() - started >= 0.04  # (the timeout, give or take the clock)
    assert not store._listeners


def test_cancels_nobody_held_are_kept_up_to_the_bound() -> None:
    """A cancel no waiter holds is kept for the next wait, the :data:`UNREPORTED` most
    recent ones only (a listener that only ever waits for work never grows)."""

    async def connect() -> object:  # pragma: no cover - never opened here
        raise AssertionError

    listener = Listener(connect, "work", "cancel")
    for n in range(UNREPORTED + 5):
        listener._on_cancel(None, 0, "cancel", f"t{n}")
    kept = listener._unreported
    assert len(kept) == UNREPORTED
    assert "t4" not in kept
    assert "t5" in kept
    assert f"t{UNREPORTED + 4}" in kept


# -- SQLite file ------------------------------------------------------------------------


async def test_sqlite_a_cancel_through_another_engine_reaches_a_waiter(
    tmp_path: Path,
) -> None:
    """On a SQLite file, a cancel committed by another store (another engine) MUST be
    reported to a waiter — whether it lands before the wait (read when the wait begins)
    or during it (read when the file changes)."""
    url = f"sqlite:///{tmp_path}/shared.db"
    waiter = await SQLStore.open(url)
    writer = await SQLStore.open(url)
    try:
        assert waiter.capabilities.cancel_wakeups
        await _claimed(writer, "before", "during")
        await _cancel(writer, "before")  # before any wait of the waiter
        assert {"before"} == await waiter.wait_for_cancels({"before", "during"}, WAIT)
        waiting = asyncio.ensure_future(waiter.wait_for_cancels({"during"}, WAIT))
        await asyncio.sleep(0)
        await _cancel(writer, "during")
        assert {"during"} == await asyncio.wait_for(waiting, WAIT)
    finally:
        await writer.aclose()
        await waiter.aclose()


async def test_sqlite_reads_only_its_own_namespace(tmp_path: Path) -> None:
    """The status read uses the namespace's table: a task of the same id cancelled in
    another namespace of the file MUST NOT be reported."""
    url = f"sqlite:///{tmp_path}/shared.db"
    waiter = await SQLStore.open(url, namespace="a")
    other = await SQLStore.open(url, namespace="b")
    try:
        await _claimed(waiter, "t1")
        await _claimed(other, "t1")
        await _cancel(other, "t1")
        assert set() == await waiter.wait_for_cancels({"t1"}, 0.2)
        await _cancel(waiter, "t1")
        assert {"t1"} == await waiter.wait_for_cancels({"t1"}, WAIT)
    finally:
        await other.aclose()
        await waiter.aclose()


CANCELLER = textwrap.dedent(
    """
    import asyncio, sys
    from tasks_core import Access, Cancelled, Owner
    from tasks_store_sql import PostgresStore, SQLStore

    async def main(url, task_id):
        store = await SQLStore.open(url, busy_timeout=30)
        try:
            current = await store.get(task_id, tenant=None)
            owner = Access(principal=Owner("alice"), visibility="watchers")
            done = await store.transition(task_id, current.revision,
                                          Cancelled(event_id="c"), owner)
            assert done.outcome == "applied", done
        finally:
            await store.aclose()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_sqlite_a_cancel_from_another_process_reaches_a_waiter(
    tmp_path: Path,
) -> None:
    """A cancel committed by another OS process on the same SQLite file MUST be reported
    to a waiter in this one."""
    url = f"sqlite:///{tmp_path}/shared.db"
    store = await SQLStore.open(url)
    try:
        await _claimed(store, "t1", "t2")
        watched = {"t1"}
        waiting = asyncio.ensure_future(store.wait_for_cancels(watched, 60))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CANCELLER, url, "t1",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(proc.communicate(), 120)
        assert 0 == proc.returncode, err.decode()[-2000:]
        assert {"t1"} == await asyncio.wait_for(waiting, 60)
    finally:
        await store.aclose()
