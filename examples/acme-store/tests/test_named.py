"""What AcmeStore adds to the contract: stores shared by name within a process."""

from __future__ import annotations

import pytest
from tasks_core import InvalidInput, NewTask, TaskQuery, Work, open_store
from tasks_store_acme import AcmeStore
from tasks_store_acme.store import drop

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """Stores are asyncio libraries."""
    return "asyncio"


def _task(task_id: str) -> NewTask:
    return NewTask(id=task_id, tenant="default", owner=None, work=Work(name="job"))


async def test_opening_a_name_again_returns_the_same_store() -> None:
    """Two opens of one name MUST share tasks; another name or namespace MUST NOT."""
    try:
        first = await open_store("acme://shared")
        await first.create(_task("t1"))
        await first.aclose()
        again = await open_store("acme://shared/")
        other = await open_store("acme://shared", namespace="n1")
        assert isinstance(again, AcmeStore)
        assert ["t1"] == [s.id for s in await again.list(TaskQuery(tenant=None))]
        assert [] == await other.list(TaskQuery(tenant=None))
    finally:
        await drop("acme://shared")
        await drop("acme://shared", "n1")


async def test_options_for_an_open_store_are_refused() -> None:
    """Options MUST apply only at creation; later opens passing them are refused."""
    try:
        await open_store("acme://limited", max_tasks=1)
        with pytest.raises(InvalidInput, match="open already"):
            await open_store("acme://limited", max_tasks=2)
    finally:
        await drop("acme://limited")


@pytest.mark.parametrize("url", ["acme://bad name", "acme://x/path", "memory://"])
async def test_bad_urls_are_refused(url: str) -> None:
    """Only ``acme://<name>`` MUST be accepted."""
    from tasks_store_acme.store import open_acme

    with pytest.raises(InvalidInput, match="acme://<name>"):
        await open_acme(url)


async def test_a_read_command_never_makes_a_store() -> None:
    """``tasks ls`` opens with ``create=False``, which a third-party store honours: a
    name nobody opened MUST be refused (``UnknownStore``, with how to name the right
    store) and stay unopened; an open one opens with ``create=False``."""
    from tasks_core import UnknownStore
    from tasks_core.cli.main import run

    with pytest.raises(UnknownStore, match="--store URL"):
        await run(["ls", "--system", "--store", "acme://never-opened"])
    with pytest.raises(UnknownStore):
        await open_store("acme://never-opened", create=False)
    try:
        store = await open_store("acme://opened")
        await store.create(_task("t1"))
        again = await open_store("acme://opened", create=False)
        assert ["t1"] == [s.id for s in await again.list(TaskQuery(tenant=None))]
    finally:
        await drop("acme://opened")
