"""Shared fixtures of the tasks-core unit tests."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tasks_core import NewTask, Owner, Snapshot, Work, rules


@pytest.fixture
def anyio_backend() -> str:
    """Stores are asyncio libraries."""
    return "asyncio"


@pytest.fixture
def now() -> datetime:
    """A fixed store instant (whole milliseconds)."""
    return datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def snapshot(now: datetime) -> Snapshot:
    """A fresh pending task of ``alice`` created at ``now``."""
    new = NewTask(id="alice::job", tenant="default", owner=Owner("alice"), work=Work(name="job"))
    return rules.new_snapshot(new, now)
