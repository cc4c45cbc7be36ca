"""The deployment: capabilities per topology, indexes, server time, clients, wakeups
across clients, and driver errors translated to the core tree."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from mongo_server import Server, free_port, secantusd, store_url
from pymongo import AsyncMongoClient, MongoClient
from tasks_contract_tests._kit import ALICE, LEASE_S, access, new_task
from tasks_core import (
    Cancelled,
    CapabilityNotSupported,
    CapacityExceeded,
    InvalidInput,
    ManualClock,
    StoreUnavailable,
    TaskQuery,
    find_store,
    open_store,
)
from tasks_core.clock import utc
from tasks_store_mongo import MongoStore
from tasks_store_mongo.plugin import open_mongo

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[Any]]
HAS_SECANTUS = shutil.which(secantusd()) is not None or Path(secantusd()).exists()


async def test_replica_set_offers_every_capability(open_store: Opener) -> None:
    """On a replica set (the test server is one) the store MUST offer wakeups and
    exclusive queues, as its plugin declares."""
    store = await open_store()
    if not store._transactions:
        pytest.skip("the test server is not a replica set")
    assert MongoStore.CAPABILITIES == store.capabilities
    assert find_store("mongodb://").capabilities == store.capabilities


@pytest.mark.skipif(not HAS_SECANTUS, reason="secantusd-py is not installed")
async def test_standalone_server_turns_wakeups_off_and_keeps_queue_limits(
    tmp_path: Path, driver: str
) -> None:
    """On a standalone server (no transactions, no change streams) ``wakeups`` and
    ``cancel_wakeups`` MUST be off and raise ``CapabilityNotSupported``, and so MUST
    ``batch_transitions``; ``exclusive_queues`` and ``queue_limits`` MUST be on (the
    queue's document, ``_alone_limits``); everything else MUST work, ``max_tasks``
    included."""
    server = Server(standalone=True).start()
    try:
        store = await open_mongo(store_url(server.url, driver), clock=ManualClock(), max_tasks=2)
        try:
            caps = store.capabilities
            assert (True, True, False, True, False, True) == (
                caps.durable, caps.multi_process, caps.wakeups, caps.exclusive_queues,
                caps.cancel_wakeups, caps.queue_limits,
            )
            with pytest.raises(CapabilityNotSupported):
                await store.wait_for_work(["default"], 0.01)
            with pytest.raises(CapabilityNotSupported):
                await store.wait_for_cancels(set(), 0.01)
            assert [] == await store.claim_next("w", LEASE_S, queues=["q"], exclusive=["q"])
            assert not caps.batch_transitions  # no transactions: a batch is not one step
            with pytest.raises(CapabilityNotSupported):
                await store.transition_many([])
            task = await store.create(new_task())
            await store.create(new_task())
            with pytest.raises(CapacityExceeded):
                await store.create(new_task())
            done = await store.transition(task.id, 0, Cancelled(event_id="c"), access(ALICE))
            await store.delete(task.id, expected_revision=done.snapshot.revision)
            await store.create(new_task())
            assert 2 == len(await store.list(TaskQuery(tenant=None)))
        finally:
            await store.aclose()
    finally:
        server.stop()


async def test_indexes_are_created_once_whatever_the_number_of_opens(
    open_store: Opener,
) -> None:
    """Opening a namespace again MUST leave the same indexes, the ``claim_next`` order
    (queue, availability, minus the priority, available instant, id) and the
    ``next_available`` one (queue, availability, available instant, id) among them."""
    first = await open_store()
    indexes = await first._tasks.index_information()
    await open_store()
    assert indexes == await first._tasks.index_information()
    keys = [k for k, _ in indexes["claim_next"]["key"]]
    assert ["queue", "_ready", "_prio", "_avail", "_id", "_ready_at"] == keys
    keys = [k for k, _ in indexes["next_available"]["key"]]
    assert ["queue", "_ready", "_avail", "_id"] == keys


async def test_store_time_is_the_server_clock(open_store: Opener, mongo_base_url: str) -> None:
    """Without an injected clock, instants MUST come from the server's clock: a task's
    ``created_at`` lies between two readings of the server's ``hello.localTime``."""
    store = await open_store()
    probe: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_base_url)
    try:
        before = utc((await probe.admin.command("hello"))["localTime"])
        created = await store.create(new_task())
        after = utc((await probe.admin.command("hello"))["localTime"])
    finally:
        await probe.close()
    assert before <= created.created_at <= after
    assert UTC == created.created_at.tzinfo
    now = await store.now()
    assert created.created_at <= now


async def test_a_client_passed_in_is_used_and_never_closed(
    mongo_base_url: str, driver: str, namespace: str
) -> None:
    """A store opened on the application's client MUST use it and MUST NOT close it."""
    if driver == "motor":
        from motor.motor_asyncio import AsyncIOMotorClient

        client: Any = AsyncIOMotorClient(mongo_base_url)
    else:
        client = AsyncMongoClient(mongo_base_url)
    try:
        store = await MongoStore.open(client, database="tasks_test", namespace=namespace)
        assert driver == store.driver
        created = await store.create(new_task())
        await store.aclose()
        raw = await client["tasks_test"][f"{namespace}.tasks"].find_one({"_id": created.id})
        assert created.id == raw["_id"]
    finally:
        await client["tasks_test"].drop_collection(f"{namespace}.tasks")
        await client["tasks_test"].drop_collection(f"{namespace}.counters")
        await client["tasks_test"].drop_collection(f"{namespace}.queues")
        await client["tasks_test"].drop_collection(f"{namespace}.queue_claims")
        closing = client.close()
        if asyncio.iscoroutine(closing):
            await closing


async def test_a_synchronous_client_is_refused(mongo_base_url: str) -> None:
    """A synchronous ``MongoClient`` MUST be refused with ``InvalidInput``."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_base_url)
    with client, pytest.raises(InvalidInput):
        await MongoStore.open(client)


async def test_a_store_opened_by_url_serves_other_event_loops(open_store: Opener) -> None:
    """A store opened from a URL MUST work from a thread running its own event loop (it
    opens a client for that loop)."""
    store = await open_store(clock=ManualClock())
    created = await store.create(new_task())
    seen: list[str] = []

    def other_thread() -> None:
        seen.append(asyncio.run(store.get(created.id, tenant=None)).id)

    thread = threading.Thread(target=other_thread)
    thread.start()
    await asyncio.to_thread(thread.join)
    assert [created.id] == seen


async def test_a_passed_in_client_refuses_other_event_loops(
    mongo_base_url: str, namespace: str
) -> None:
    """A store on the application's client MUST refuse another event loop with
    ``InvalidInput`` (that client is bound to its own loop) rather than hang or crash."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_base_url)
    try:
        store = await MongoStore.open(client, database="tasks_test", namespace=namespace)
        errors: list[BaseException] = []

        def other_thread() -> None:
            try:
                asyncio.run(store.now())
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=other_thread)
        thread.start()
        await asyncio.to_thread(thread.join)
        assert [InvalidInput] == [type(e) for e in errors]
    finally:
        for name in ("tasks", "counters", "queues", "queue_claims"):
            await client["tasks_test"].drop_collection(f"{namespace}.{name}")
        await client.close()


async def test_wakeups_cross_clients(open_store: Opener) -> None:
    """A create through one client MUST wake a worker waiting through another (a change
    stream); creates on another queue MUST NOT wake it.

    Real time (a change stream): the waiter listens 0.5 s while the other queue is written
    to, then the writer creates on the watched queue until the waiter returns.
    """
    waiter = await open_store()
    if not waiter.capabilities.wakeups:
        pytest.skip("wakeups need a replica set")
    writer = await open_store()
    quiet = asyncio.Event()

    async def elsewhere() -> None:
        while not quiet.is_set():
            await writer.create(new_task(queue="other"))
            await asyncio.sleep(0.02)

    pester = asyncio.create_task(elsewhere())
    assert False is await waiter.wait_for_work(["mail"], 0.5)
    quiet.set()
    await pester

    woken = asyncio.create_task(waiter.wait_for_work(["mail"], 30))
    for _ in range(500):
        await asyncio.sleep(0.01)
        if woken.done():
            break
        await writer.create(new_task(queue="mail"))
    assert True is await woken


async def test_an_unreachable_server_raises_store_unavailable(driver: str) -> None:
    """A server that cannot be reached MUST raise ``StoreUnavailable`` (the driver's error
    chained as the cause), never a driver exception."""
    url = f"mongodb://127.0.0.1:{free_port()}/tasks?serverSelectionTimeoutMS=200&driver={driver}"
    with pytest.raises(StoreUnavailable) as caught:
        await open_mongo(url)
    assert caught.value.__cause__ is not None


async def test_open_store_by_url_with_each_driver(url: str, namespace: str) -> None:
    """``tasks_core.open_store`` MUST open the store at a ``mongodb://`` URL with the
    ``driver`` and ``namespace`` it names."""
    async with open_store(f"{url}&namespace={namespace}") as store:
        assert isinstance(store, MongoStore)
        assert (namespace, url.rsplit("driver=", 1)[1]) == (store.namespace, store.driver)
        await store.create(new_task())
        assert 1 == len(await store.list(TaskQuery(tenant=None)))
    async with open_store(url, namespace=namespace) as store:
        assert 1 == len(await store.list(TaskQuery(tenant=None)))
        for name in ("tasks", "counters", "queues", "queue_claims"):
            await store._db.drop_collection(f"{namespace}.{name}")  # type: ignore[attr-defined]

