"""The memory store passes the whole contract suite (it is the reference)."""

from __future__ import annotations

from typing import Any

import pytest
from tasks_contract_tests import StoreContract
from tasks_core import TaskStore
from tasks_store_memory import MemoryStore


class TestMemoryStore(StoreContract):
    """Every contract test against ``MemoryStore``."""

    @pytest.fixture
    async def store_factory(self) -> Any:
        async def factory(**options: Any) -> TaskStore:
            return MemoryStore(**options)

        return factory

    @pytest.fixture
    def corrupt_task(self) -> Any:
        async def corrupt(store: MemoryStore, task_id: str) -> None:
            store._corrupt(task_id)

        return corrupt
