"""Cancel wakeups on a replica set: ``wait_for_cancels`` across clients, between waits,
across event loops, from a token the server cannot resume from, and through ``aclose``.

Every test runs on both drivers (the ``driver`` fixture). A canceller is a second store on
a client of its own, as another process would be. Nothing sleeps: a waiter is known to be
listening once its stream's first read returned (a spy on ``_start_cancels``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tasks_contract_tests._kit import ALICE, access, new_task
from tasks_core import Cancelled, Completed
from tasks_store_mongo._cancels import UNREPORTED_CANCELS

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[Any]]
WAIT_S = 30.0
"""A bound on waits that must end early; reaching it is the failure."""


async def _pair(open_store: Opener) -> tuple[Any, Any]:
    """A waiter and a canceller: two stores on separate clients, one namespace."""
    waiter = await open_store()
    if not waiter.capabilities.cancel_wakeups:
        pytest.skip("cancel wakeups need a replica set")
    return waiter, await open_store()


async def _cancel(store: Any, task_id: str) -> None:
    current = await store.get(task_id, tenant=None)
    done = await store.transition(task_id, current.revision, Cancelled(event_id="cancel"),
                                  access(ALICE))
    assert "applied" == done.outcome, done


def _spy_listening(store: Any, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """An event set once a cancel stream of ``store`` is open and read once."""
    listening = asyncio.Event()
    start = store._start_cancels

    async def spied(*args: Any) -> tuple[Any, Any]:
        opened = await start(*args)
        listening.set()
        return opened  # type: ignore[no-any-return]

    monkeypatch.setattr(store, "_start_cancels", spied)
    return listening


async def test_a_cancel_through_another_client_wakes_a_waiter(
    open_store: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel committed through another client while a waiter listens MUST be reported
    to that waiter before its timeout (read from the change stream, not a backlog)."""
    waiter, canceller = await _pair(open_store)
    task = (await canceller.create(new_task())).id
    listening = _spy_listening(waiter, monkeypatch)
    woken = asyncio.create_task(waiter.wait_for_cancels({task}, WAIT_S))
    await asyncio.wait_for(listening.wait(), WAIT_S)
    assert not woken.done()
    await _cancel(canceller, task)
    assert {task} == await asyncio.wait_for(woken, WAIT_S)


async def test_a_cancel_between_waits_is_reported_by_the_next_wait(
    open_store: Opener,
) -> None:
    """A cancel committed through another client after the first wait and before the
    next MUST be reported by the next, even with a timeout of 0 (the new stream starts
    where the last one stopped, so the cancel is in its first batch)."""
    waiter, canceller = await _pair(open_store)
    first = (await canceller.create(new_task())).id
    second = (await canceller.create(new_task())).id
    assert set() == await waiter.wait_for_cancels(set(), 0)
    await _cancel(canceller, first)
    assert {first} == await asyncio.wait_for(waiter.wait_for_cancels({first}, WAIT_S), WAIT_S)
    await _cancel(canceller, second)
    assert {second} == await waiter.wait_for_cancels({second}, 0)


async def test_a_cancel_read_while_unwatched_is_reported_once_watched(
    open_store: Opener,
) -> None:
    """A cancel a wait reads for a task it does not watch MUST be kept and reported by a
    later wait that watches the task (a worker may start watching a task whose cancel
    landed just before); the completion of a watched task MUST NOT be reported."""
    waiter, canceller = await _pair(open_store)
    held = (await canceller.create(new_task())).id
    done = await canceller.create(new_task())
    claimed = await canceller.claim(done.id, "w1", 60)
    assert set() == await waiter.wait_for_cancels(set(), 0)
    await _cancel(canceller, held)
    finished = await canceller.transition(done.id, claimed.snapshot.revision,
                                          Completed(event_id="done"), claimed.lease)
    assert "applied" == finished.outcome, finished
    assert set() == await waiter.wait_for_cancels({done.id}, 0.2)
    assert {held} == await waiter.wait_for_cancels({held, done.id}, 0)
    assert set() == await waiter.wait_for_cancels({held}, 0.05)  # reported once


async def test_unreported_cancels_are_bounded(open_store: Opener) -> None:
    """The cancels kept for later waits MUST stay within ``UNREPORTED_CANCELS``, the
    oldest dropped first."""
    waiter, _ = await _pair(open_store)
    for n in range(UNREPORTED_CANCELS + 2):
        waiter._sort({"documentKey": {"_id": f"t{n}"}}, set(), set())
    assert UNREPORTED_CANCELS == len(waiter._unreported)
    assert set() == waiter._take_unreported({"t0", "t1"})
    assert {"t2"} == waiter._take_unreported({"t2"})


async def test_a_token_the_server_refuses_starts_the_stream_from_now(
    open_store: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    """A resume token the server cannot resume from (history lost, collection dropped)
    MUST NOT fail the wait: the stream starts from now, with a warning, and the next
    wait reports a cancel made after it again."""
    waiter, canceller = await _pair(open_store)
    task = (await canceller.create(new_task())).id
    waiter._cancels_after = {"_data": "00"}
    with caplog.at_level(logging.WARNING, logger="tasks_store_mongo"):
        assert set() == await waiter.wait_for_cancels(set(), 0)
    assert any("cannot resume" in r.getMessage() for r in caplog.records)
    assert {"_data": "00"} != waiter._cancels_after
    await _cancel(canceller, task)
    assert {task} == await asyncio.wait_for(waiter.wait_for_cancels({task}, WAIT_S), WAIT_S)


async def test_waits_on_another_event_loop_resume_the_same_stream(
    open_store: Opener,
) -> None:
    """A store opened by URL MUST report, from another thread's event loop (its own
    client), a cancel committed after a wait on the first loop."""
    waiter, canceller = await _pair(open_store)
    task = (await canceller.create(new_task())).id
    assert set() == await waiter.wait_for_cancels(set(), 0)
    await _cancel(canceller, task)
    seen: list[set[str]] = []

    def other_thread() -> None:
        seen.append(asyncio.run(waiter.wait_for_cancels({task}, WAIT_S)))

    thread = threading.Thread(target=other_thread)
    thread.start()
    await asyncio.to_thread(thread.join)
    assert [{task}] == seen


async def test_aclose_ends_a_wait(open_store: Opener, monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing the store MUST end a wait in progress with an empty set, not an error."""
    waiter, _ = await _pair(open_store)
    listening = _spy_listening(waiter, monkeypatch)
    woken = asyncio.create_task(waiter.wait_for_cancels({"never"}, WAIT_S))
    await asyncio.wait_for(listening.wait(), WAIT_S)
    await waiter.aclose()
    assert set() == await asyncio.wait_for(woken, WAIT_S)
