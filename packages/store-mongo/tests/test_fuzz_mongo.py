"""The runtime model, bad-input fuzzing, forged leases, tenant isolation and damaged
documents on MongoDB (small, deterministic budgets: the memory store runs the same
properties deeper in tasks-core's tests)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from mongo_server import store_url
from tasks_contract_tests.garbage import SECRET, check_contained, seed
from tasks_contract_tests.properties import PropertyChecks
from tasks_core import ManualClock, TaskStore
from tasks_store_mongo.plugin import drop_namespace, open_mongo

Factory = Callable[..., Awaitable[TaskStore]]

DAMAGE: dict[str, dict[str, Any]] = {
    "revision is text": {"$set": {"revision": SECRET}},
    "input is not JSON": {"$set": {"work.input": "{" + SECRET}},
    "owner is text": {"$set": {"owner": SECRET}},
    "tenant is a number": {"$set": {"tenant": 5}},
    "created_at missing": {"$unset": {"created_at": ""}},
    "status unknown": {"$set": {"status": SECRET}},
}


@pytest.fixture
def factory(mongo_base_url: str) -> Iterator[Factory]:
    """``await factory(**options)``: a store in a fresh namespace of the test database
    (opened on the caller's loop); every namespace is dropped after the test."""
    url = store_url(mongo_base_url, "pymongo")
    namespaces: list[str] = []

    async def open_store(**options: Any) -> TaskStore:
        namespace = "z" + secrets.token_hex(5)
        namespaces.append(namespace)
        return await open_mongo(url, namespace=namespace, **options)

    yield open_store

    async def drop() -> None:
        for namespace in namespaces:
            await drop_namespace(url, namespace)

    asyncio.run(drop())


class TestProperties(PropertyChecks):
    """The four property runs on MongoDB."""

    @pytest.fixture
    def store_factory(self, factory: Factory) -> Factory:
        return factory


@pytest.mark.anyio
@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
async def test_a_damaged_document_costs_only_its_record(
    factory: Factory, damage: dict[str, Any]
) -> None:
    """A task document damaged behind the store's back MUST read as ``StoreCorrupt``
    naming only its id (to those who may learn of it; as missing to anyone else), and
    listings, ``claim_next`` and ``reap`` MUST carry on past it."""
    clock = ManualClock()
    store: Any = await factory(clock=clock)
    try:
        seeded = await seed(store, clock)
        await store._tasks.update_one({"_id": seeded.victim}, damage)
        await check_contained(store, clock, seeded)
    finally:
        await store.aclose()
