"""The whole contract suite against MongoStore, once per driver.

Every store gets a fresh namespace (collection prefix) in the test database, dropped at
the end of the test, so the server's collections stay small.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mongo_server import store_url
from tasks_contract_tests import StoreContract
from tasks_core import TaskStore
from tasks_store_mongo.plugin import drop_namespace, open_mongo


class _MongoContract(StoreContract):
    driver = "pymongo"

    @pytest.fixture
    async def store_factory(self, mongo_base_url: str) -> AsyncIterator[Any]:
        url = store_url(mongo_base_url, self.driver)
        namespaces: list[str] = []

        async def factory(**options: Any) -> TaskStore:
            namespace = "c" + secrets.token_hex(5)
            namespaces.append(namespace)
            return await open_mongo(url, namespace=namespace, **options)

        yield factory
        for namespace in namespaces:
            await drop_namespace(url, namespace)

    @pytest.fixture
    def corrupt_task(self) -> Any:
        async def corrupt(store: Any, task_id: str) -> None:
            await store._corrupt(task_id)

        return corrupt

    async def test_default_limits_accept_a_backlog_past_the_old_caps(self) -> None:
        """Ten thousand creates: run once per backend by the URL suite (the nox
        ``contract`` sessions), not again here."""
        pytest.skip("run by `python -m tasks_contract_tests --store-url` (nox contract)")


class TestMongoStorePyMongo(_MongoContract):
    """Every contract test on PyMongo's ``AsyncMongoClient``."""

    driver = "pymongo"


class TestMongoStoreMotor(_MongoContract):
    """Every contract test on motor's ``AsyncIOMotorClient``."""

    driver = "motor"
