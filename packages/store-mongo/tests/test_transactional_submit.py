"""``transactional_submit``: ``create(transaction=session)`` writes the task (and the
counters) inside the application's own transaction on a ``ClientSession`` of the store's
client — it exists only if the application commits — and refuses, writing nothing, any
other value. A standalone server (no transactions) refuses with ``CapabilityNotSupported``.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mongo_server import Server, secantusd, store_url
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import (
    App,
    CapabilityNotSupported,
    CapacityExceeded,
    InvalidInput,
    Owner,
    TaskContext,
    TaskExists,
    TaskNotFound,
    TaskQuery,
    TaskStatus,
)
from tasks_store_mongo._driver import DRIVERS, open_client, settle
from tasks_store_mongo.plugin import open_mongo

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[Any]]
HAS_SECANTUS = shutil.which(secantusd()) is not None or Path(secantusd()).exists()
ALICE = Owner("alice")


@pytest.fixture
async def client(mongo_base_url: str, driver: str) -> AsyncIterator[Any]:
    """The application's own client (of this test's driver); the store is given it."""
    own = open_client(mongo_base_url, driver)  # type: ignore[arg-type]
    yield own
    await settle(own.close())


@pytest.fixture
async def store(open_store: Opener, client: Any) -> Any:
    """A store on the application's client; skipped unless the server runs transactions."""
    opened = await open_store(client=client)
    if not opened.capabilities.transactional_submit:
        pytest.skip("transactions need a replica set")
    return opened


@pytest.fixture
async def orders(store: Any) -> AsyncIterator[Any]:
    """The application's own collection, written in the same transaction as the task."""
    name = f"{store.namespace}.orders"
    await store._db.create_collection(name)
    yield store._db[name]
    await store._db.drop_collection(name)


async def _begun(client: Any) -> Any:
    """A session of ``client`` with a transaction started (as the application would)."""
    session = await settle(client.start_session())
    await settle(session.start_transaction())
    return session


async def _state(store: Any) -> tuple[list[Any], list[str]]:
    """The counter documents and the stored task ids: what a refusal must not change."""
    counters = [doc async for doc in store._counters.find({}, sort=[("_id", 1)])]
    tasks = [doc["_id"] async for doc in store._tasks.find({}, {"_id": 1}, sort=[("_id", 1)])]
    return counters, tasks


async def test_app_submit_in_the_application_transaction_runs_only_if_it_commits(
    store: Any, client: Any, orders: Any
) -> None:
    """``App.submit(..., transaction=session)`` MUST create the task inside the
    application's transaction — gone with an abort (counters unchanged), there after a
    commit and then run by a worker — and a keyed re-submit of a finished task MUST
    replace it inside the transaction too."""
    app = App(store=store)
    ran: list[str] = []

    @app.task
    async def ship(ctx: TaskContext, order: int) -> int:
        ran.append(ctx.task_id)
        return order

    async with app:
        before = await _state(store)
        session = await _begun(client)
        try:
            await orders.insert_one({"_id": 10}, session=session)
            lost = await app.submit(ship, {"order": 10}, ALICE, transaction=session)
            await settle(session.abort_transaction())
        finally:
            await settle(session.end_session())
        with pytest.raises(TaskNotFound):
            await app.get(lost.id, ALICE)
        assert before == await _state(store)
        assert [] == await orders.find({}).to_list(None)

        session = await _begun(client)
        try:
            await orders.insert_one({"_id": 11}, session=session)
            kept = await app.submit(ship, {"order": 11}, ALICE, key="order-11",
                                    transaction=session)
            await settle(session.commit_transaction())
        finally:
            await settle(session.end_session())
        async with app.worker(concurrency=1):
            done = await app.wait(kept.id, ALICE, timeout=30)
        assert (done.status, done.result, ran) == (TaskStatus.COMPLETED, 11, [kept.id])
        assert [{"_id": 11}] == await orders.find({}).to_list(None)

        session = await _begun(client)
        try:
            again = await app.submit(ship, {"order": 11}, ALICE, key="order-11",
                                     transaction=session)
            assert again.outcome == "replaced"
            await settle(session.abort_transaction())
        finally:
            await settle(session.end_session())
        current = await app.get(kept.id, ALICE)
        assert (current.run_id, current.status) == (kept.run_id, TaskStatus.COMPLETED)

        session = await _begun(client)
        try:
            again = await app.submit(ship, {"order": 11}, ALICE, key="order-11",
                                     transaction=session)
            await settle(session.commit_transaction())
        finally:
            await settle(session.end_session())
        async with app.worker(concurrency=1):
            rerun = await app.wait(kept.id, ALICE, timeout=30)
        assert (rerun.run_id, rerun.status) == (again.run_id, TaskStatus.COMPLETED)
        assert ran == [kept.id, kept.id]


async def test_uncommitted_task_is_unseen_and_wakes_no_worker_before_its_commit(
    store: Any, client: Any
) -> None:
    """Until the application commits, the task MUST be invisible outside its transaction
    (no get, no claim) and MUST NOT wake a worker waiting on its queue (a change stream
    carries a transaction's writes at its commit); once committed it is claimed.

    (That a waiter wakes at a commit is the change stream's own promise, tested with
    every create in ``test_deployment.py``; here a waiter that is not listening yet only
    makes the "not woken" check weaker, never wrong.)"""
    queue = "outbox"
    waiter = asyncio.create_task(store.wait_for_work([queue], 20.0))
    try:
        session = await _begun(client)
        try:
            created = await store.create(new_task(queue=queue), transaction=session)
            with pytest.raises(TaskNotFound):
                await store.get(created.id, tenant=None)
            assert [] == await store.claim_next("w1", LEASE_S, queues=[queue])
            done, _ = await asyncio.wait({waiter}, timeout=0.5)  # an absence: bounded
            assert not done, "woken before the commit"
            await settle(session.commit_transaction())
        finally:
            await settle(session.end_session())
    finally:
        waiter.cancel()
    claimed = await store.claim_next("w1", LEASE_S, queues=[queue])
    assert [created.id] == [c.snapshot.id for c in claimed]


async def _other_driver_session(mongo_base_url: str, driver: str) -> tuple[Any, Any]:
    other = open_client(mongo_base_url, next(d for d in DRIVERS if d != driver))
    return other, await _begun(other)


@pytest.mark.parametrize(
    "bad", ["not a session", "no transaction", "committed", "another client", "other driver"]
)
async def test_a_bad_session_is_refused_and_nothing_is_written(
    store: Any, client: Any, mongo_base_url: str, driver: str, bad: str
) -> None:
    """``create(transaction=…)`` MUST refuse with ``InvalidInput``, before writing
    anything, a value that is not a session, a session with no transaction in progress
    (never started, or committed), and a session of another client (of the same driver or
    the other)."""
    before = await _state(store)
    others: list[Any] = []
    session: Any = None
    if bad == "not a session":
        value: Any = object()
    elif bad == "no transaction":
        value = session = await settle(client.start_session())
    elif bad == "committed":
        value = session = await _begun(client)
        await settle(session.commit_transaction())
    elif bad == "another client":
        others.append(open_client(mongo_base_url, driver))  # type: ignore[arg-type]
        value = session = await _begun(others[0])
    else:
        other, value = await _other_driver_session(mongo_base_url, driver)
        others.append(other)
        session = value
    try:
        with pytest.raises(InvalidInput):
            await store.create(new_task(), transaction=value)
        with pytest.raises(InvalidInput):
            await App(store=store).submit("job", {}, ALICE, transaction=value)
    finally:
        if session is not None:
            await settle(session.end_session())
        for other in others:
            await settle(other.close())
    assert before == await _state(store)


async def test_store_refusals_in_the_transaction_leave_counters_as_they_were(
    open_store: Opener, client: Any
) -> None:
    """A create the store refuses inside the application's transaction (``TaskExists``,
    ``CapacityExceeded`` after the ``max_tasks`` slot was counted) MUST leave nothing of it
    in that transaction: when the application commits anyway, the counters and tasks are
    those before the refusals plus what it did create."""
    store = await open_store(client=client, max_active_tasks_per_scope=1)
    if not store.capabilities.transactional_submit:
        pytest.skip("transactions need a replica set")
    first = await store.create(new_task())
    before = await _state(store)
    session = await _begun(client)
    try:
        with pytest.raises(TaskExists):
            await store.create(new_task(first.id), transaction=session)
        with pytest.raises(CapacityExceeded):  # the tenant already has one active task
            await store.create(new_task(), transaction=session)
        await settle(session.commit_transaction())
    finally:
        await settle(session.end_session())
    counters, tasks = await _state(store)
    tenant_before = [c for c in before[0] if c["_id"] != f"tenant:{first.tenant}"]
    assert (tenant_before, before[1]) == (
        [c for c in counters if c["_id"] != f"tenant:{first.tenant}"], tasks
    )
    assert [first.id] == [s.id for s in await store.list(TaskQuery(tenant=None))]


@pytest.mark.skipif(not HAS_SECANTUS, reason="secantusd-py is not installed")
async def test_standalone_server_refuses_a_transaction(driver: str) -> None:
    """On a standalone server (no transactions) ``transactional_submit`` MUST be off and
    ``create(transaction=…)`` / ``App.submit(..., transaction=…)`` MUST raise
    ``CapabilityNotSupported``, storing nothing."""
    server = Server(standalone=True).start()
    try:
        own = open_client(server.url, driver)  # type: ignore[arg-type]
        try:
            store = await open_mongo(store_url(server.url, driver), client=own)
            try:
                assert not store.capabilities.transactional_submit
                session = await settle(own.start_session())
                try:
                    with pytest.raises(CapabilityNotSupported):
                        await store.create(new_task("t1"), transaction=session)
                    with pytest.raises(CapabilityNotSupported):
                        await App(store=store).submit("job", {}, ALICE, transaction=session)
                finally:
                    await settle(session.end_session())
                assert [] == await store.list(TaskQuery(tenant=None))
            finally:
                await store.aclose()
        finally:
            await settle(own.close())
    finally:
        server.stop()
