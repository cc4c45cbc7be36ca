"""Multi-document transactions: a ``TransientTransactionError`` is retried to exactly one
applied result.

The errors are injected with mongod's ``failCommand`` failpoint, scoped by ``appName`` to
the store's own client; the server must allow test commands (SecantusDB is started with
``--enable-test-commands``; a genuine mongod needs ``enableTestCommands=1``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure
from tasks_contract_tests._kit import ALICE, LEASE_S, access, new_task
from tasks_core import Cancelled, ManualClock, StoreUnavailable, TaskQuery
from tasks_core.storekit import QueueLimits

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[Any]]
APP = "tasks-failpoint"


@pytest.fixture
async def failpoint(mongo_base_url: str) -> AsyncIterator[Callable[..., Awaitable[None]]]:
    """``await failpoint(command, times=1, code=112)``: fail the next ``times`` runs of
    ``command`` from the store's client with ``TransientTransactionError``."""
    admin: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_base_url)
    armed: list[bool] = []

    async def arm(command: str, *, times: int = 1, code: int = 112) -> None:
        try:
            await admin.admin.command(
                {
                    "configureFailPoint": "failCommand",
                    "mode": {"times": times},
                    "data": {
                        "failCommands": [command],
                        "errorCode": code,
                        "errorLabels": ["TransientTransactionError"],
                        "appName": APP,
                    },
                }
            )
        except OperationFailure:
            pytest.skip("the server does not allow test commands (configureFailPoint)")
        armed.append(True)

    try:
        yield arm
    finally:
        if armed:
            await admin.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        await admin.close()


async def _transactional(open_store: Opener, url: str, **options: Any) -> Any:
    store = await open_store(url=f"{url}&appName={APP}", clock=ManualClock(), **options)
    if not store._transactions:
        pytest.skip("transactions need a replica set")
    return store


@pytest.mark.parametrize("command", ["find", "update", "aggregate", "insert", "commitTransaction"])
async def test_transient_error_in_create_is_retried_to_one_task(
    open_store: Opener, url: str, failpoint: Callable[..., Awaitable[None]], command: str
) -> None:
    """A ``TransientTransactionError`` anywhere in the create transaction (the read, the
    capacity counters, the count, the insert, the commit) MUST be retried: exactly one task is
    stored and counted once. The tenant limit is set so that the count (``aggregate``)
    runs: it is off by default."""
    store = await _transactional(open_store, url, max_active_tasks_per_scope=100)
    first = await store.create(new_task())
    await failpoint(command)
    second = await store.create(new_task())
    assert 1 == store.transaction_retries
    listed = await store.list(TaskQuery(tenant=None))
    assert [first.id, second.id] == [s.id for s in listed]
    assert 2 == (await store._counters.find_one({"_id": "tasks"}))["n"]


async def test_transient_error_in_delete_is_retried_to_one_removal(
    open_store: Opener, url: str, failpoint: Callable[..., Awaitable[None]]
) -> None:
    """A ``TransientTransactionError`` in the delete transaction MUST be retried: the task
    is gone and the counter is decremented exactly once."""
    store = await _transactional(open_store, url)
    task = await store.create(new_task())
    done = await store.transition(task.id, 0, Cancelled(event_id="c"), access(ALICE))
    await failpoint("delete")
    await store.delete(task.id, expected_revision=done.snapshot.revision)
    assert 1 == store.transaction_retries
    assert [] == await store.list(TaskQuery(tenant=None))
    assert 0 == (await store._counters.find_one({"_id": "tasks"}))["n"]


async def test_transient_error_in_exclusive_claim_is_retried_to_one_lease(
    open_store: Opener, url: str, failpoint: Callable[..., Awaitable[None]]
) -> None:
    """A ``TransientTransactionError`` in an exclusive claim MUST be retried: exactly one
    lease, one delivery."""
    store = await _transactional(open_store, url)
    task = await store.create(new_task(queue="serial"))
    await failpoint("commitTransaction")
    [claim] = await store.claim_next("w1", LEASE_S, queues=["serial"], exclusive=["serial"])
    assert 1 == store.transaction_retries
    assert task.id == claim.snapshot.id
    assert 1 == (await store.get(task.id, tenant=None)).deliveries


@pytest.mark.parametrize("command", ["findAndModify", "insert", "commitTransaction"])
async def test_transient_error_in_limited_claim_is_retried_to_one_logged_claim(
    open_store: Opener, url: str, failpoint: Callable[..., Awaitable[None]], command: str
) -> None:
    """A ``TransientTransactionError`` in a claim of a rate-limited queue (taking the
    queue's document, logging the claim, the commit) MUST be retried: one lease, one
    delivery, one claim logged."""
    store = await _transactional(open_store, url)
    task = await store.create(new_task(queue="paced"))
    await failpoint(command)
    [claim] = await store.claim_next("w1", LEASE_S, queues=["paced"],
                                     limits={"paced": QueueLimits(rate=(5, 60))})
    assert 1 == store.transaction_retries
    assert task.id == claim.snapshot.id
    assert 1 == (await store.get(task.id, tenant=None)).deliveries
    logged = [doc["n"] async for doc in store._queue_claims.find({"q": "paced"})]
    assert [1] == logged


async def test_transaction_that_keeps_conflicting_reports_store_unavailable(
    open_store: Opener, url: str, failpoint: Callable[..., Awaitable[None]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A transaction that conflicts on every try MUST end in ``StoreUnavailable`` (once
    its retry budget is spent: shortened here) with nothing stored (and the session ended,
    so no transaction stays open)."""
    monkeypatch.setattr("tasks_store_mongo._driver.TRANSACTION_BUDGET_S", 0.3)
    store = await _transactional(open_store, url)
    await store.create(new_task())
    await failpoint("insert", times=1000)
    with pytest.raises(StoreUnavailable):
        await store.create(new_task())
    await failpoint("insert", times=0)
    assert 1 == len(await store.list(TaskQuery(tenant=None)))
    assert 1 == (await store._counters.find_one({"_id": "tasks"}))["n"]
