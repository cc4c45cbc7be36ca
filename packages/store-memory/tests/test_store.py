"""What only ``MemoryStore`` itself can show: its own constructor's ``limits``, that its
index of open tasks forgets a task once nothing can claim it or hold a queue with it (the
index is the store's memory; a finished task left in it is kept for ever), and that a
claim pre-selects no task its queue has no room for."""

from __future__ import annotations

import pytest
from tasks_core import (
    CapacityExceeded,
    Completed,
    InvalidInput,
    NewTask,
    StoreLimits,
    Work,
    open_store,
)
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _new(task_id: str, queue: str = "default") -> NewTask:
    return NewTask(id=task_id, tenant="default", owner=None, queue=queue,
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


async def test_a_claim_pre_selects_at_most_the_room_of_each_queue() -> None:
    """``claim_next`` pre-selects (``_pick``) up to ``limit`` ready tasks in claim order
    and at most ``room(queue)`` of each queue: with a limit of 3, queue ``a``'s three
    oldest tasks and room for 2 of them, it picks a1, a2 and b's b1 — a3 (past a's room)
    does not take b1's place, and b2 (past the limit) is left.

    Only the pre-selection can show this: the claims of ``claim_next`` would be the same
    (``ClaimScan`` refuses a task past its queue's room and the store picks again from
    the queues with room), but a limited queue's backlog would cost a pass for every
    call that reaches its room."""
    store = MemoryStore()
    for task_id in ("a1", "a2", "a3", "b1", "b2"):  # claim order: created one after another
        await store.create(_new(task_id, queue=task_id[0]))
    rooms = {"a": 2}

    def room(queue: str) -> int:
        return rooms.get(queue, 3)  # an unlimited queue: room for what is left to claim

    with store._locked() as now:
        picked = store._pick(["a", "b"], 3, room, now)
    assert ["a1", "a2", "b1"] == [task_id for task_id, _ in picked]


async def test_a_row_shares_no_value_with_a_snapshot_given_or_handed_out() -> None:
    """A row keeps the snapshot last written as its own copy (``models.detached``): its
    JSON values are never the objects of the ``NewTask``, the claim, the event or a read
    — so no caller can change what is stored. (The contract suite shows the effect; this
    shows the copies themselves, which a store that copies on every read only would not
    have.)"""
    store = MemoryStore()
    new = NewTask(id="t", tenant="default", owner=None, queue="default",
                  work=Work(name="job", input={"items": [1]}))
    await store.create(new)

    def kept_input() -> object:
        return store._rows["t"].snapshot.work.input

    assert new.work.input == kept_input()
    assert new.work.input is not kept_input()
    [claim] = await store.claim_next("w", 30, queues=["default"])
    assert claim.snapshot.work.input is not kept_input()
    done = Completed(event_id="done", result={"n": [7]})
    finished = await store.transition("t", claim.snapshot.revision, done, claim.lease)
    kept = store._rows["t"].snapshot
    assert {"n": [7]} == kept.result
    assert kept.result is not done.result
    assert kept.result is not finished.snapshot.result
    read = await store.get("t", tenant="default")
    assert read.result == kept.result
    assert read.result is not kept.result


@pytest.mark.parametrize("url", ["memory://x", "memory://?max_tasks=1", "memory:///path",
                                 "memory://user:secret@host"])
async def test_a_memory_url_with_anything_after_the_scheme_is_refused(url: str) -> None:
    """``memory://`` alone MUST open the store; anything after the scheme (a host, a path,
    a ``?option``) MUST be ``InvalidInput`` — never ignored, as if it said something."""
    store = await open_store("memory://")
    await store.aclose()
    with pytest.raises(InvalidInput, match="'memory://' alone"):
        await open_store(url)
