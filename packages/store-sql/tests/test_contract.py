"""The contract suite on an in-memory SQLite database (``sqlite://``).

SQLite files, PostgreSQL and MariaDB, each on every driver the package supports, run the
suite by URL in the nox ``contract`` sessions (``python -m tasks_contract_tests
--store-url``) — once each, there, with the URL runner's own tests (processes racing, the
plugin's capabilities). An in-memory database cannot be shared by two stores of a URL, so
it runs here.
"""

from __future__ import annotations

from typing import Any

import pytest
from tasks_contract_tests import StoreContract
from tasks_store_sql import SQLStore


async def _corrupt(store: SQLStore, task_id: str) -> None:
    await store._corrupt(task_id)


class TestSQLiteMemoryStore(StoreContract):
    """Every contract test on an in-memory SQLite database."""

    @pytest.fixture
    def corrupt_task(self) -> Any:
        return _corrupt

    @pytest.fixture
    async def store_factory(self) -> Any:
        async def open_store(**options: Any) -> SQLStore:
            return await SQLStore.open("sqlite://", **options)

        return open_store

    @pytest.fixture
    def begin_transaction(self) -> Any:
        pytest.skip("an in-memory database is one connection, so no transaction of the "
                    "application's is apart from the store's: run by URL (nox contract)")

    async def test_default_limits_accept_a_backlog_past_the_old_caps(self) -> None:
        """A backlog past the old caps: proven on a SQLite file by the URL suite (nox
        ``contract(sqlite)``), not again in memory."""
        pytest.skip("run by `python -m tasks_contract_tests --store-url` (nox contract)")
