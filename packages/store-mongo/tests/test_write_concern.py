"""Write concern: every write the store sends carries ``{w: "majority", j: true}`` unless
the URL (or the application's client) says otherwise — proven with PyMongo command
monitoring on the client the store opens, on both drivers."""

from __future__ import annotations

import functools
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mongo_server import Server, secantusd, store_url
from pymongo import AsyncMongoClient, monitoring
from tasks_contract_tests._kit import ALICE, LEASE_S, access, new_task
from tasks_core import Cancelled, Completed, InvalidInput, ManualClock
from tasks_store_mongo import _driver
from tasks_store_mongo.plugin import open_mongo
from tasks_store_mongo.store import MongoStore

pytestmark = pytest.mark.anyio

WRITES = frozenset({"insert", "update", "findAndModify", "delete"})
"""Write commands that carry a write concern outside a transaction."""
ENDS = frozenset({"commitTransaction", "abortTransaction"})
"""Transaction ends: the transaction's write concern travels with them."""
DURABLE = {"w": "majority", "j": True}


class Commands(monitoring.CommandListener):
    """Every command started on the client, as ``(name, command)``."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent.append((event.command_name, dict(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def concerns(self) -> Iterator[tuple[str, Any]]:
        """``(name, writeConcern)`` of every write and transaction end; a write inside a
        transaction must carry none (the server refuses one), so it is checked here."""
        for name, command in self.sent:
            in_transaction = "autocommit" in command
            if name in ENDS:
                yield name, command.get("writeConcern")
            elif name in WRITES:
                if in_transaction:
                    assert "writeConcern" not in command, (name, command)
                    yield "in-transaction", None
                else:
                    yield name, command.get("writeConcern")


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> Commands:
    """A listener on every client the store opens (``_driver.open_client``)."""
    listener = Commands()
    monkeypatch.setattr(
        _driver, "open_client",
        functools.partial(_driver.open_client, event_listeners=[listener]),
    )
    return listener


async def workload(store: MongoStore, clock: ManualClock) -> None:
    """create, claim_next (plain and exclusive), renew, report_progress, transition,
    claim, release, cancel, delete, reap."""
    first = await store.create(new_task())
    expiring = await store.create(new_task(ttl_s=1))
    serial = await store.create(new_task(queue="serial"))
    (claimed,) = await store.claim_next("w1", LEASE_S, queues=["default"])
    assert first.id == claimed.snapshot.id
    _, lease = await store.renew(claimed.lease, LEASE_S)
    await store.report_progress(lease, 0.5, "half")
    await store.transition(first.id, 0, Completed(event_id="done", result=1), lease)
    _, held = await store.claim(expiring.id, "w1", LEASE_S)
    await store.release(held)
    if store.capabilities.exclusive_queues:
        (exclusive,) = await store.claim_next(
            "w1", LEASE_S, queues=["serial"], exclusive=["serial"]
        )
        assert serial.id == exclusive.snapshot.id
    await store.transition(serial.id, 0, Cancelled(event_id="stop"), access(ALICE))
    await store.delete(first.id, expected_revision=1)
    clock.advance(2)
    assert [expiring.id] == await store.reap()


async def test_every_write_is_majority_and_journaled_by_default(
    url: str, namespace: str, commands: Commands
) -> None:
    """With nothing said in the URL, every write command and every transaction commit the
    store sends MUST carry ``writeConcern {w: "majority", j: true}``."""
    clock = ManualClock()
    store = await open_mongo(
        url, clock=clock, namespace=namespace, max_tasks=100, max_active_tasks_per_scope=10
    )
    try:
        commands.sent.clear()  # setup's writes are checked by the next assertion's kin
        await workload(store, clock)
    finally:
        await store.aclose()
    concerns = list(commands.concerns())
    names = {name for name, _ in concerns}
    # On a replica set creates, deletes and reaps are transactions: their commits carry it.
    transactions = store._transactions
    assert ({"update", "commitTransaction"} if transactions
            else {"update", "insert", "delete"}) <= names, names
    assert [] == [(n, c) for n, c in concerns if n != "in-transaction" and c != DURABLE]


@pytest.mark.skipif(
    shutil.which(secantusd()) is None and not Path(secantusd()).exists(),
    reason="secantusd-py is not installed",
)
async def test_every_write_is_majority_and_journaled_on_a_standalone_server(
    driver: str, commands: Commands
) -> None:
    """A standalone server runs no transaction: every insert, update and delete itself
    MUST carry ``{w: "majority", j: true}`` (there, acknowledged once journaled) — the
    tenant's active-task counter and its releases included."""
    server = Server(standalone=True).start()
    try:
        clock = ManualClock()
        store = await open_mongo(store_url(server.url, driver), clock=clock, max_tasks=100,
                                 max_active_tasks_per_scope=3)
        try:
            commands.sent.clear()
            await workload(store, clock)
            for _ in range(3):  # the last one finds the counter full: the cancelled task
                await store.create(new_task())  # of the workload is released for it
        finally:
            await store.aclose()
    finally:
        server.stop()
    concerns = list(commands.concerns())
    assert {"insert", "update", "delete"} <= {n for n, _ in concerns}
    assert [] == [(n, c) for n, c in concerns if c != DURABLE]


async def test_setup_writes_are_majority_and_journaled(
    url: str, namespace: str, commands: Commands
) -> None:
    """Opening a store (collections, indexes, the tasks counter) writes durably too."""
    store = await open_mongo(url, namespace=namespace)
    await store.aclose()
    setup = [(n, c.get("writeConcern")) for n, c in commands.sent
             if n in {"create", "createIndexes", "update"}]
    assert {"createIndexes", "update"} <= {n for n, _ in setup}
    assert [] == [(n, c) for n, c in setup if c != DURABLE]


async def test_w1_in_the_url_relaxes_the_default_knowingly(
    url: str, namespace: str, commands: Commands
) -> None:
    """``?w=1`` in the URL MUST win: every write carries ``{w: 1}`` and no journal flag;
    a ``wtimeoutMS`` alone keeps the default and adds the timeout."""
    clock = ManualClock()
    store = await open_mongo(f"{url}&w=1", clock=clock, namespace=namespace, max_tasks=100)
    try:
        commands.sent.clear()
        await workload(store, clock)
    finally:
        await store.aclose()
    concerns = [(n, c) for n, c in commands.concerns() if n != "in-transaction"]
    assert concerns
    assert [] == [(n, c) for n, c in concerns if c != {"w": 1}]
    commands.sent.clear()
    timed = await open_mongo(f"{url}&wtimeoutMS=5000", namespace=namespace)
    try:
        await timed.create(new_task())
    finally:
        await timed.aclose()
    sent = [c for n, c in commands.concerns() if n in {"insert", "commitTransaction"}]
    assert [{**DURABLE, "wtimeout": 5000}] == sent


async def test_journal_false_in_the_url_wins(
    url: str, namespace: str, commands: Commands
) -> None:
    """``?journal=false`` is an explicit choice: the store sends the URL's concern."""
    store = await open_mongo(f"{url}&journal=false", namespace=namespace)
    try:
        await store.create(new_task())
    finally:
        await store.aclose()
    sent = [c.get("writeConcern") for n, c in commands.sent if n in ENDS | WRITES
            and "autocommit" not in c]
    assert sent
    assert all(concern == {"j": False} for concern in sent), sent


@pytest.mark.parametrize(("query", "code_name"), [
    ("w=majorityx", "UnknownReplWriteConcern"),
    ("w=5&wtimeoutMS=1000", "UnsatisfiableWriteConcern"),
])
async def test_a_write_concern_the_server_refuses_is_refused_at_open_creating_nothing(
    mongo_base_url: str, driver: str, query: str, code_name: str
) -> None:
    """A ``w`` the server refuses (a mode no replica set configuration names, more nodes
    than it has) MUST be ``InvalidInput`` at open naming the URL's write concern options
    and the server's code name — and nothing created first (a fresh database stays
    empty), not a ``StoreError`` with a bare code after an empty collection was made."""
    database = "wc" + secrets.token_hex(4)
    base = store_url(mongo_base_url, driver, database)
    with pytest.raises(InvalidInput, match=rf"'w'.*{code_name}"):
        await open_mongo(f"{base}&{query}")
    client: Any = AsyncMongoClient(mongo_base_url)
    try:
        assert [] == await client[database].list_collection_names()
    finally:
        await client.close()


async def test_w0_is_refused(url: str, namespace: str) -> None:
    """An unacknowledged write concern cannot back a compare-and-set."""
    with pytest.raises(InvalidInput):
        await open_mongo(f"{url}&w=0", namespace=namespace)


async def test_a_client_passed_in_gets_the_default_unless_it_chose(
    mongo_base_url: str, namespace: str, driver: str
) -> None:
    """A client the application passes without a write concern of its own gets the
    store's default; one configured with ``w=1`` keeps it."""
    if driver != "pymongo":
        pytest.skip("the driver of a passed-in client is the application's")
    for options, expected in (({}, DURABLE), ({"w": 1}, {"w": 1})):
        listener = Commands()
        client: Any = AsyncMongoClient(
            mongo_base_url, tz_aware=True, event_listeners=[listener], **options
        )
        try:
            store = await MongoStore.open(client, database="tasks_test", namespace=namespace)
            await store.create(new_task())
            await store.aclose()
            sent = [c for n, c in listener.concerns() if n != "in-transaction"]
            assert sent
            assert all(concern == expected for concern in sent), sent
            await client["tasks_test"].drop_collection(f"{namespace}.tasks")
            await client["tasks_test"].drop_collection(f"{namespace}.counters")
            await client["tasks_test"].drop_collection(f"{namespace}.queues")
        finally:
            await client.close()
