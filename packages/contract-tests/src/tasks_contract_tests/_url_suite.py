"""The contract suite against ``--tasks-store-url``: one fresh namespace per test."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tasks_core import StoreSpec, TaskStore, find_store

from tasks_contract_tests import StoreContract
from tasks_contract_tests._base import Corrupter, StoreFactory


class TestStoreAtURL(StoreContract):
    """Every contract test against the store the URL names."""

    @pytest.fixture
    def store_url(self, request: pytest.FixtureRequest) -> str:
        url = request.config.getoption("--tasks-store-url")
        if not url:
            pytest.skip("no --tasks-store-url given")
        return str(url)

    @pytest.fixture
    def store_spec(self, store_url: str) -> StoreSpec:
        return find_store(store_url)

    @pytest.fixture
    async def store_factory(
        self, store_url: str, store_spec: StoreSpec
    ) -> AsyncIterator[StoreFactory]:
        namespaces: list[str] = []

        async def factory(**options: Any) -> TaskStore:
            namespace = "t" + secrets.token_hex(5)
            if store_spec.create_namespace is not None:
                await store_spec.create_namespace(store_url, namespace)
            namespaces.append(namespace)
            return await store_spec.factory(store_url, namespace=namespace, **options)

        yield factory
        if store_spec.drop_namespace is not None:
            for namespace in namespaces:
                await store_spec.drop_namespace(store_url, namespace)

    @pytest.fixture
    def corrupt_task(self, store_spec: StoreSpec) -> Corrupter | None:
        return store_spec.corrupt
