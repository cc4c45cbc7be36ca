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
from tasks_contract_tests.bad_input import run_client_fuzz, run_lease_fuzz
from tasks_contract_tests.garbage import SECRET, check_contained, seed
from tasks_contract_tests.isolation import run_isolation_check
from tasks_contract_tests.runtime_machine import run_runtime_model_check
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


def test_the_app_agrees_with_the_runtime_model(factory: Factory) -> None:
    """An App on MongoDB MUST show after every step of random programs (client calls,
    worker steps, crashes, clock moves) what the pure runtime model predicts."""
    run_runtime_model_check(factory, max_examples=6, steps=20)


def test_client_calls_refuse_bad_input_and_write_nothing(factory: Factory) -> None:
    """Hostile arguments to every client call and CLI command MUST be refused with a named
    error of the tree (never a driver error) and leave the database unchanged; what is
    accepted MUST read back exactly."""
    run_client_fuzz(factory, max_examples=15, full_catalogue=False, sync_twin=False)


def test_forged_leases_are_lost_and_change_nothing(factory: Factory) -> None:
    """Leases with another token, task, generation or worker MUST get ``LeaseLost`` from
    every lease operation and worker event, and change nothing."""
    run_lease_fuzz(factory, max_examples=30)


def test_outsiders_learn_and_change_nothing(factory: Factory) -> None:
    """Calls by other tenants and non-members MUST leave a tenant's tasks unchanged and
    answer about an existing task exactly as about a missing one."""
    run_isolation_check(factory, max_examples=25)


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
