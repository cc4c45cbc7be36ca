"""What only ``MemoryStore`` itself can show: its own constructor's ``limits`` and that
its index of open tasks forgets a task once nothing can claim it or hold a queue with it
(the index is the store's memory; a finished task left in it is kept for ever)."""

from __future__ import annotations

import pytest
from tasks_core import CapacityExceeded, Completed, NewTask, StoreLimits, Work
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _new(task_id: str) -> NewTask:
    return NewTask(id=task_id, tenant="default", owner=None, queue="default",
                   work=Work(name="job"))


async def test_limits_given_as_store_limits_are_kept() -> None:
    """``MemoryStore(limits=StoreLimits(max_tasks=2))`` takes 2 tasks and refuses the 3rd
    with ``CapacityExceeded("max_tasks")``; a keyword limit overrides the same field of
    ``limits`` (here to 3) and keeps the others (``max_active_tasks_per_scope=1``)."""
    store = MemoryStore(limits=StoreLimits(max_tasks=2))
    await store.create(_new("a"))
    await store.create(_new("b"))
    with pytest.raises(CapacityExceeded) as caught:
        await store.create(_new("c"))
    assert "max_tasks" == caught.value.limit
    both = MemoryStore(limits=StoreLimits(max_tasks=2, max_active_tasks_per_scope=1),
                       max_tasks=3)
    assert (3, 1) == (both.limits.max_tasks, both.limits.max_active_tasks_per_scope)


async def test_a_finished_task_leaves_the_index_of_open_tasks() -> None:
    """A task is in the index while it may be claimed or holds a lease, and leaves it
    when it finishes with its lease ended."""
    store = MemoryStore()
    await store.create(_new("t"))
    assert ["t"] == list(store._open)
    [claim] = await store.claim_next("w", 30, queues=["default"])
    assert ["t"] == list(store._open)
    await store.transition("t", claim.snapshot.revision, Completed(event_id="done"), claim.lease)
    assert [] == list(store._open)
