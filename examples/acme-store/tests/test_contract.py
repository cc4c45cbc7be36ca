"""AcmeStore passes the whole tasks contract suite and its property runs: the one file a
store author writes."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from tasks_contract_tests import StoreContract
from tasks_contract_tests.properties import PropertyChecks
from tasks_core import TaskStore, find_store, open_store

URL = "acme://contract"


class TestAcmeStore(StoreContract, PropertyChecks):
    """Every contract test and property run against ``AcmeStore``, found through its
    entry point, with one async ``store_factory``."""

    @pytest.fixture
    async def store_factory(self) -> AsyncIterator[Callable[..., Awaitable[TaskStore]]]:
        """A fresh, empty store per call: a new namespace, dropped after the test."""
        spec = find_store(URL)
        assert spec.drop_namespace is not None
        namespaces: list[str] = []

        async def factory(**options: Any) -> TaskStore:
            namespaces.append(secrets.token_hex(8))
            return await open_store(URL, namespace=namespaces[-1], **options)

        yield factory
        for namespace in namespaces:
            await spec.drop_namespace(URL, namespace)

    @pytest.fixture
    def corrupt_task(self) -> Callable[[TaskStore, str], Awaitable[None]] | None:
        """The plugin's own test hook damages a stored record."""
        return find_store(URL).corrupt
