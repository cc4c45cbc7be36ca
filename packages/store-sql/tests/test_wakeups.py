"""PostgreSQL wakeups across engines (as across machines): LISTEN/NOTIFY."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import sqlalchemy as sa
from tasks_core import (
    Access,
    CapabilityNotSupported,
    InputRequested,
    InputResponsesAccepted,
    NewTask,
    Owner,
    Work,
)
from tasks_store_sql import SQLStore

pytestmark = pytest.mark.anyio

ALICE = Owner("alice")
WAIT = 10.0


def _new(task_id: str, queue: str = "mail") -> NewTask:
    return NewTask(id=task_id, tenant="default", owner=ALICE, queue=queue, work=Work(name="j"))


@pytest.fixture
async def pair(postgres_url: str) -> AsyncIterator[tuple[SQLStore, SQLStore]]:
    """A waiting store and a writing store on separate engines, one namespace."""
    waiter = await SQLStore.open(postgres_url, namespace="wake", schema="upgrade")
    writer = await SQLStore.open(postgres_url, namespace="wake", schema="upgrade")
    async with writer.engine.begin() as conn:
        for table in (writer.tables.events, writer.tables.members, writer.tables.tasks):
            await conn.execute(sa.delete(table))
        await conn.execute(sa.update(writer.tables.locks).values(value=0))
    yield waiter, writer
    await writer.aclose()
    await waiter.aclose()


async def _woken(
    store: SQLStore, queue: str, poke: Callable[[], Awaitable[object]], pokes: int = 20
) -> bool:
    waiting = asyncio.ensure_future(store.wait_for_work([queue], WAIT))
    for _ in range(pokes):
        await asyncio.sleep(0.02)
        if waiting.done():
            break
        await poke()
    return await waiting


async def test_a_task_created_through_another_engine_wakes_a_waiter(
    pair: tuple[SQLStore, SQLStore],
) -> None:
    """A create committed through another engine (another machine) MUST wake a worker
    waiting on that queue."""
    waiter, writer = pair
    count = iter(range(100))
    assert await _woken(waiter, "mail", lambda: writer.create(_new(f"t{next(count)}")))


async def test_an_answer_that_makes_a_task_runnable_wakes_a_waiter(
    pair: tuple[SQLStore, SQLStore],
) -> None:
    """Accepting the last outstanding answer makes the task claimable again: it MUST wake
    waiters on its queue."""
    waiter, writer = pair
    tasks = []
    for n in range(20):
        await writer.create(_new(f"t{n}"))
        held = await writer.claim(f"t{n}", "w", 30)
        ask = InputRequested(event_id="ask", key="k")
        await writer.transition(f"t{n}", 0, ask, held.lease)
        await writer.release(held.lease)
        tasks.append(f"t{n}")
    owner = Access(principal=ALICE, visibility="watchers")
    left = iter(tasks)

    async def answer() -> object:
        event = InputResponsesAccepted(event_id="answer", responses={"k": 1})
        return await writer.transition(next(left), 1, event, owner)

    assert await _woken(waiter, "mail", answer)


async def test_a_rolled_back_create_wakes_nobody(pair: tuple[SQLStore, SQLStore]) -> None:
    """A task created in a transaction that rolls back never existed: it MUST NOT wake
    anyone (notifications are sent at commit)."""
    waiter, writer = pair
    waiting = asyncio.ensure_future(waiter.wait_for_work(["quiet"], 0.5))
    await asyncio.sleep(0.1)
    async with writer.engine.connect() as conn:
        trans = await conn.begin()
        await writer.create(_new("ghost", queue="quiet"), transaction=conn)
        await trans.rollback()
    assert False is await waiting


async def test_other_queues_do_not_wake_a_waiter(pair: tuple[SQLStore, SQLStore]) -> None:
    """Work on another queue MUST NOT wake a waiter."""
    waiter, writer = pair
    waiting = asyncio.ensure_future(waiter.wait_for_work(["quiet"], 0.5))
    await asyncio.sleep(0.1)
    await writer.create(_new("elsewhere", queue="busy"))
    assert False is await waiting


async def test_work_notified_while_nobody_waits_wakes_the_next_wait_at_once(
    pair: tuple[SQLStore, SQLStore],
) -> None:
    """Work created while no waiter listens on its queue (a worker busy claiming) MUST
    make the next ``wait_for_work`` on that queue return ``True`` at once — not sleep
    until its timeout with claimable work in the table.

    Troubleshooting: a notification that finds no waiter for its queue is remembered
    until the next wait on that queue.
    """
    waiter, writer = pair
    assert False is await waiter.wait_for_work(["mail"], 0.01)  # listening from here on
    marker = asyncio.ensure_future(waiter.wait_for_work(["other"], WAIT))
    await asyncio.sleep(0.1)
    await writer.create(_new("unheard"))  # nobody waits on "mail" now
    await writer.create(_new("marker", queue="other"))
    assert True is await marker  # notifications arrive in commit order: "mail" came first
    assert True is await waiter.wait_for_work(["mail"], WAIT)


async def test_a_lost_listening_connection_wakes_waiters_and_reconnects(
    pair: tuple[SQLStore, SQLStore],
) -> None:
    """When the listening connection is killed, waiters MUST wake (an empty poll costs
    nothing) and the next wait MUST listen again."""
    waiter, writer = pair
    assert False is await waiter.wait_for_work(["mail"], 0.01)
    waiting = asyncio.ensure_future(waiter.wait_for_work(["mail"], WAIT))
    await asyncio.sleep(0.1)
    async with writer.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN %' AND datname = current_database()"
            )
        )
    assert True is await asyncio.wait_for(waiting, WAIT)
    count = iter(range(100))
    assert await _woken(waiter, "mail", lambda: writer.create(_new(f"t{next(count)}")))


async def _server_now(store: SQLStore) -> object:
    async with store.engine.connect() as conn:
        return (await conn.execute(sa.text("SELECT clock_timestamp()"))).scalar_one()


async def _listening_since(store: SQLStore, channel: str, since: object) -> int:
    """Listening connections on ``channel`` opened after ``since`` (server time: closed
    ones may linger in ``pg_stat_activity`` a moment after their client left)."""
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE query = :listen "
            "AND datname = current_database() AND backend_start > :since"),
            {"listen": f'LISTEN "{channel}"', "since": since})).scalar_one())


async def test_a_closed_store_listens_no_more(
    postgres_url: str, pair: tuple[SQLStore, SQLStore],
) -> None:
    """``aclose`` stops listening: a wait that comes after it (a worker still running
    when its store was closed) MUST return ``True`` at once, as a SQLite file's watcher
    does, and MUST NOT open a listening connection again, which nothing would close."""
    _, writer = pair
    closed = await SQLStore.open(postgres_url, namespace="wake")
    channel = closed._channel
    opened = await _server_now(writer)
    assert False is await closed.wait_for_work(["mail"], 0.01)
    assert await _listening_since(writer, channel, opened) == 1
    await closed.aclose()
    after_close = await _server_now(writer)
    assert True is await asyncio.wait_for(closed.wait_for_work(["mail"], WAIT), WAIT / 2)
    assert await _listening_since(writer, channel, after_close) == 0


async def test_stores_without_wakeups_refuse_to_wait() -> None:
    """SQLite and MariaDB have no wakeups: ``wait_for_work`` MUST raise
    ``CapabilityNotSupported`` (the runtime polls)."""
    store = SQLStore("sqlite://")
    try:
        assert False is store.capabilities.wakeups
        with pytest.raises(CapabilityNotSupported):
            await store.wait_for_work(["default"], 0.01)
    finally:
        await store.aclose()
