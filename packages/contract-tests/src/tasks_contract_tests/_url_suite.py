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

    async def test_the_plugin_declares_every_capability_its_store_has(
        self, store: TaskStore, store_spec: StoreSpec
    ) -> None:
        """Every flag the store reports MUST be on in its plugin's ``StoreSpec``: the spec
        declares the most a URL of the plugin can get (``tasks backends``, the stress
        harness and callers choosing a store read it), the store what this URL has —
        it may have less (MariaDB has no wakeups), never more.

        Troubleshooting: declare the spec's ``capabilities`` as the union of what the
        plugin's stores can offer, and each store's as what it offers here.
        """
        spec = store_spec.capabilities.model_dump()
        beyond = sorted(k for k, on in store.capabilities.model_dump().items()
                        if on and not spec[k])
        assert [] == beyond, f"the store has {beyond}, which its spec does not declare"
