"""The writer queues: SQLite's writers and the creators of a server namespace — first come,
first served, across threads; bounded waits."""

from __future__ import annotations

import asyncio
import threading

import pytest
import tasks_store_sql.store as sql_store
from conftest import Opener
from tasks_core import NewTask, Owner, StoreUnavailable, TaskNotFound, Work
from tasks_store_sql._writers import WriterQueue, writer_queue

pytestmark = pytest.mark.anyio


async def test_writers_get_the_slot_in_arrival_order() -> None:
    """Writers waiting for the slot MUST get it in the order they asked."""
    queue = WriterQueue()
    order: list[int] = []
    gate = asyncio.Event()

    async def writer(n: int) -> None:
        async with queue.slot(5):
            if n == 0:
                await gate.wait()
            order.append(n)

    first = asyncio.ensure_future(writer(0))
    await asyncio.sleep(0)
    rest = []
    for n in range(1, 6):
        rest.append(asyncio.ensure_future(writer(n)))
        await asyncio.sleep(0)  # each one queues before the next asks
    gate.set()
    await asyncio.gather(first, *rest)
    assert [0, 1, 2, 3, 4, 5] == order


async def test_a_writer_that_waits_too_long_gives_up_without_blocking_the_others() -> None:
    """A writer that cannot get the slot within its timeout MUST raise
    ``StoreUnavailable``, and the writers behind it MUST still get the slot."""
    queue = WriterQueue()
    gate = asyncio.Event()

    async def holder() -> None:
        async with queue.slot(5):
            await gate.wait()

    held = asyncio.ensure_future(holder())
    await asyncio.sleep(0)
    with pytest.raises(StoreUnavailable, match="nothing was written"):
        async with queue.slot(0.01):
            pass
    patient = asyncio.ensure_future(_enter(queue))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(held, patient)
    assert patient.result() is True


async def _enter(queue: WriterQueue) -> bool:
    async with queue.slot(5):
        return True


def test_threads_with_their_own_loops_share_one_slot() -> None:
    """Writers on several threads (each with its own event loop) MUST never hold the
    slot at the same time."""
    queue = writer_queue("/tmp/tasks-test-threads.db")
    inside = 0
    most = 0
    lock = threading.Lock()

    async def write() -> None:
        nonlocal inside, most
        for _ in range(50):
            async with queue.slot(10):
                with lock:
                    inside += 1
                    most = max(most, inside)
                await asyncio.sleep(0)
                with lock:
                    inside -= 1

    threads = [threading.Thread(target=asyncio.run, args=(write(),)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert (1, 0) == (most, inside)


@pytest.fixture(params=["postgres", "mariadb"])
def server_opener(request: pytest.FixtureRequest) -> Opener:
    """Each database server in turn (SQLite's writers have a queue of their own)."""
    opener: Opener = request.getfixturevalue(f"{request.param}_opener")
    return opener


async def test_a_create_that_gets_no_turn_fails_and_writes_nothing(
    server_opener: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creates of one store queue for the creators' lock row; one that waits longer than
    its bound MUST raise ``StoreUnavailable`` naming the reason, and nothing is stored."""
    store = await server_opener()
    try:
        monkeypatch.setattr(sql_store, "CREATOR_WAIT", 0.05)
        assert store._creators is not None
        async with store._creators.slot(5):  # another create of this process holds the turn
            with pytest.raises(StoreUnavailable, match="concurrent creates"):
                await store.create(_new("late"))
        with pytest.raises(TaskNotFound):
            await store.get("late", tenant=None)
        assert (await store.create(_new("late"))).revision == 0
    finally:
        await store.aclose()


def _new(task_id: str) -> NewTask:
    return NewTask(id=task_id, tenant="default", owner=Owner("a"), work=Work(name="job"))
