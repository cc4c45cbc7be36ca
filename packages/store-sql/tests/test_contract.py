"""The whole contract suite on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Opener
from tasks_contract_tests import StoreContract
from tasks_store_sql import SQLStore


async def _corrupt(store: SQLStore, task_id: str) -> None:
    await store._corrupt(task_id)


class _SQLContract(StoreContract):
    @pytest.fixture
    def corrupt_task(self) -> Any:
        return _corrupt

    async def test_default_limits_accept_a_backlog_past_the_old_caps(self) -> None:
        """Ten thousand creates: run once per backend by the URL suite (the nox
        ``contract`` sessions), not again here."""
        pytest.skip("run by `python -m tasks_contract_tests --store-url` (nox contract)")


class TestSQLiteStore(_SQLContract):
    """Every contract test on a SQLite file."""

    @pytest.fixture
    async def store_factory(self, sqlite_opener: Opener) -> Opener:
        return sqlite_opener


class TestPostgresStore(_SQLContract):
    """Every contract test on PostgreSQL."""

    @pytest.fixture
    async def store_factory(self, postgres_opener: Opener) -> Opener:
        return postgres_opener


class TestMariaDBStore(_SQLContract):
    """Every contract test on MariaDB."""

    @pytest.fixture
    async def store_factory(self, mariadb_opener: Opener) -> Opener:
        return mariadb_opener


class TestSQLiteMemoryStore(_SQLContract):
    """Every contract test on an in-memory SQLite database."""

    @pytest.fixture
    async def store_factory(self) -> Opener:
        async def open_store(**options: Any) -> SQLStore:
            return await SQLStore.open("sqlite://", **options)

        return open_store
