"""A submit made outside the application's transaction, by the code that holds that
transaction open, of a key created inside it: refused at once, on every SQL database.

It waited for the row the transaction holds while the transaction waited for it — a hang
for ever (PostgreSQL) or until a lock timeout (MariaDB, SQLite), which also held up every
other create of the process queued behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from conftest import ORDERS
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from tasks_core import (
    App,
    InvalidInput,
    Owner,
    SubmitItem,
    TaskContext,
    TaskNotFound,
    Unavailable,
)
from tasks_store_sql import SQLStore

pytestmark = pytest.mark.anyio

ALICE = Owner("alice")


@pytest.fixture
async def app(app_engine: AsyncEngine, fresh_namespace: str) -> AsyncIterator[App]:
    store = await SQLStore.open(engine=app_engine, namespace=fresh_namespace)
    app = App(store=store)

    @app.task
    async def ship(ctx: TaskContext, order: int) -> int:
        return order

    try:
        async with app:
            yield app
    finally:
        await store.aclose()


async def test_a_key_created_in_an_open_transaction_is_refused_outside_it_at_once(
    app: App, app_engine: AsyncEngine
) -> None:
    """``submit`` and ``submit_many`` without ``transaction=``, in the code holding the
    transaction open, of a key that transaction created MUST raise ``Unavailable`` at once,
    nothing written; once it commits, the same submit joins."""
    async with app_engine.begin() as conn, asyncio.timeout(20):
        await conn.execute(sa.insert(ORDERS).values(id=1))
        made = await app.submit("ship", {"order": 1}, ALICE, key="k", transaction=conn)
        with pytest.raises(Unavailable, match="inside your transaction, which is still open"):
            await app.submit("ship", {"order": 1}, ALICE, key="k")
        with pytest.raises(Unavailable, match="inside your transaction"):
            await app.submit_many([SubmitItem("ship", {"order": 2}, key="other"),
                                   SubmitItem("ship", {"order": 1}, key="k")], ALICE)
    async with asyncio.timeout(20):
        joined = await app.submit("ship", {"order": 1}, ALICE, key="k")
        with pytest.raises(TaskNotFound):
            await app.get("alice::other", ALICE)
    assert ("created", "joined", made.id) == (made.outcome, joined.outcome, joined.id)


async def test_a_key_of_a_transaction_rolled_back_or_of_another_task_is_not_refused(
    app: App, app_engine: AsyncEngine
) -> None:
    """Once the transaction rolled back, its keys MUST be free to submit outside it; the
    refusal MUST NOT reach code that does not hold the transaction (another asyncio task
    started before it), whose submit waits for its end and then joins."""
    async with asyncio.timeout(20):
        async with app_engine.connect() as conn:
            async with conn.begin() as transaction:
                await app.submit("ship", {"order": 1}, ALICE, key="gone", transaction=conn)
                await transaction.rollback()
        assert "created" == (await app.submit("ship", {"order": 1}, ALICE, key="gone")).outcome

        created = asyncio.Event()
        go_on = asyncio.Event()

        async def holder() -> str:
            async with app_engine.begin() as conn:
                made = await app.submit("ship", {"order": 2}, ALICE, key="held",
                                        transaction=conn)
                created.set()
                await go_on.wait()
            return made.id

        async def other() -> str:
            await created.wait()
            go_on.set()  # the holder commits while this submit runs (or before it)
            return (await app.submit("ship", {"order": 2}, ALICE, key="held")).outcome

        other_task = asyncio.create_task(other())
        held_id = await holder()
        assert ("joined", "alice::held") == (await other_task, held_id)


async def test_an_async_session_is_refused_naming_its_connection(
    app: App, app_engine: AsyncEngine
) -> None:
    """An ``AsyncSession`` given as ``transaction=`` MUST be refused saying how to get the
    connection its transaction runs on; that connection then works, nothing written before."""
    async with AsyncSession(app_engine) as session, session.begin():
        with pytest.raises(InvalidInput, match=r"await session\.connection\(\)"):
            await app.submit("ship", {"order": 1}, ALICE, key="s", transaction=session)
        made = await app.submit("ship", {"order": 1}, ALICE, key="s",
                                transaction=await session.connection())
    assert "created" == made.outcome
    assert made.id == (await app.get("alice::s", ALICE)).id
