"""Fleet-wide queue limits through the App and workers: ``app.queue(name, max_running=N,
rate=(N, S))`` declared once, kept across several workers sharing one store, refused
before anything starts when bad, and ``exclusive`` as ``max_running=1``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from _runtime_kit import ALICE, TIMEOUT, DelegatingStore, fast_worker, make_app, until
from tasks_core import (
    App,
    CapabilityNotSupported,
    Claim,
    InvalidInput,
    Lease,
    ManualClock,
    Queue,
    StoreCapabilities,
    TaskContext,
    TaskQuery,
    TaskStatus,
)
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("options", [
    {"max_running": 0}, {"max_running": True}, {"max_running": 2.0},
    {"rate": (0, 60)}, {"rate": (5, 0)}, {"rate": (5, float("nan"))}, {"rate": 5},
    {"rate": (5, "60")}, {"exclusive": True, "max_running": 2},
])
def test_bad_queue_limits_are_refused_when_declared(options: dict[str, Any]) -> None:
    """A ``max_running`` or ``rate`` that is not a positive integer (a window not a real
    number of seconds), or ``exclusive`` with another ``max_running``: ``InvalidInput``,
    and the queue is not declared."""
    app = make_app()
    with pytest.raises(InvalidInput):
        app.queue("limited", **options)
    assert "limited" not in app.queues


def test_exclusive_and_max_running_one_are_the_same_queue() -> None:
    """The old spelling ``exclusive=True`` is ``max_running=1``; both declare one queue."""
    app = make_app()
    declared = app.queue("serial", exclusive=True)
    assert declared == Queue("serial", max_running=1)
    assert declared is app.queue("serial", max_running=1)


async def test_workers_together_never_run_more_than_max_running() -> None:
    """Three workers of concurrency 4 sharing one store run a queue of ``max_running=2``
    at most two at a time between them, and run every task."""
    store = MemoryStore()
    apps = [make_app(store=store) for _ in range(3)]
    running: list[int] = [0]
    peak: list[int] = [0]
    release, two_running = asyncio.Event(), asyncio.Event()

    for app in apps:
        app.queue("emails", max_running=2)

        @app.task(queue="emails")
        async def send(ctx: TaskContext) -> None:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] == 2:
                two_running.set()
            await release.wait()
            running[0] -= 1

    async with apps[0], apps[1], apps[2]:
        ids = [(await apps[0].submit("send", None, ALICE)).id for _ in range(8)]
        async with fast_worker(apps[0], concurrency=4), fast_worker(apps[1], concurrency=4), \
                fast_worker(apps[2], concurrency=4):
            await asyncio.wait_for(two_running.wait(), TIMEOUT)
            release.set()
            done = [await apps[0].wait(i, ALICE, timeout=TIMEOUT) for i in ids]
    assert 2 == peak[0]
    assert {TaskStatus.COMPLETED} == {snapshot.status for snapshot in done}


@pytest.mark.parametrize("limit", [{"exclusive": True}, {"max_running": 2}])
async def test_a_limited_queue_s_next_task_starts_when_a_run_ends_not_at_the_next_poll(
    limit: dict[str, Any],
) -> None:
    """A run of a limited queue that ends frees the queue's room once its outcome is
    written: the worker MUST claim the next task then — a claim asked for when the
    handler's slot freed is refused while the run's lease still counts — not wait for its
    next poll (an hour here: every task must run within ``TIMEOUT``)."""
    app = make_app(store=MemoryStore())
    app.queue("limited", **limit)

    @app.task(queue="limited")
    async def job(ctx: TaskContext) -> None:
        """Ends at once."""

    async with app:
        ids = [(await app.submit(job, None, ALICE)).id for _ in range(6)]
        async with fast_worker(app, concurrency=2, poll_interval=3600, min_poll=3600):
            done = [await app.wait(task_id, ALICE, timeout=TIMEOUT) for task_id in ids]
    assert {TaskStatus.COMPLETED} == {snapshot.status for snapshot in done}


async def test_a_rate_limited_queue_starts_no_more_than_its_rate_per_window() -> None:
    """With ``rate=(2, 60)`` on the store clock, a worker starts two tasks and leaves the
    rest pending until the clock moves past the window."""
    clock = ManualClock()
    app = make_app(clock)
    app.queue("partner", rate=(2, 60))
    started: list[str] = []

    @app.task(queue="partner")
    async def call(ctx: TaskContext) -> None:
        started.append(ctx.task_id)

    async with app:
        ids = []
        for _ in range(3):
            ids.append((await call.submit(None, ALICE)).id)
            clock.advance(0.001)
        async with fast_worker(app):
            for task_id in ids[:2]:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
            assert TaskStatus.PENDING == (await app.get(ids[2], ALICE)).status
            clock.advance(60)
            await app.wait(ids[2], ALICE, timeout=TIMEOUT)
    assert ids == started


async def test_a_worker_refuses_limits_its_store_cannot_keep() -> None:
    """A worker serving a queue with ``max_running`` (other than 1) or ``rate`` on a store
    without ``queue_limits`` refuses to start: ``CapabilityNotSupported`` — raised by
    ``async with app.worker()`` on entering, before its body runs (it was raised only on
    leaving: a web app served for its whole life with a dead worker)."""

    class NoLimits(MemoryStore):
        CAPABILITIES = StoreCapabilities(durable=False, multi_process=False, wakeups=True,
                                         exclusive_queues=True)

    app = App(store=NoLimits())
    app.queue("emails", max_running=3)

    @app.task(queue="emails")
    async def send(ctx: TaskContext) -> None:
        return None

    entered = False
    async with app:
        with pytest.raises(CapabilityNotSupported, match="queue_limits"):
            async with fast_worker(app):
                entered = True
        assert [] == await (await app.open()).list(TaskQuery(tenant=None))
    assert not entered


class RenewSignals(DelegatingStore):
    """Counts the renews that follow ``counting.set()``."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.counting = threading.Event()
        self.renews = 0
        self.renewed = asyncio.Event()

    async def renew(self, lease: Lease, lease_for: float) -> Claim:
        claim: Claim = await self.inner.renew(lease, lease_for)
        if self.counting.is_set():
            self.renews += 1
            self.renewed.set()
        return claim


@pytest.mark.parametrize("cause", ["timeout", "cancel"])
@pytest.mark.parametrize("limits", [{"exclusive": True}, {"max_running": 1, "rate": (1000, 60)}],
                         ids=["exclusive", "max_running"])
async def test_a_stopped_sync_handler_holds_its_limited_queue_until_it_returns(
    cause: str, limits: dict[str, Any]
) -> None:
    """On a queue of ``max_running=1``, a sync handler stopped by its timeout or by a
    cancel runs on in its thread; until it returns, its run keeps renewing the lease, no
    other claim of the queue succeeds and its next task waits. Then the stop's outcome is
    written (``TaskTimeout``; the cancel), the next task runs, and no two bodies ever
    overlapped."""
    clock = ManualClock()  # leases never lapse on their own
    store = RenewSignals(MemoryStore(clock=clock))
    app = App(store=store)
    app.queue("ledger", **limits)
    lock = threading.Lock()
    inside, peak = [0], [0]
    proceed = threading.Event()

    def enter() -> None:
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])

    def leave() -> None:
        with lock:
            inside[0] -= 1

    @app.task(queue="ledger", timeout=0.05 if cause == "timeout" else None)
    def post(ctx: TaskContext) -> None:
        enter()
        try:
            assert ctx.token.wait_sync(TIMEOUT)
            store.counting.set()
            assert proceed.wait(TIMEOUT)
        finally:
            leave()

    @app.task(queue="ledger")
    def after(ctx: TaskContext) -> None:
        enter()
        leave()

    async with app:
        first = await post.submit(None, ALICE)
        clock.advance(0.001)
        second = await after.submit(None, ALICE)
        async with fast_worker(app, lease_for=0.3):
            await until(app, first.id, ALICE, lambda s: s.status == TaskStatus.RUNNING)
            if cause == "cancel":
                await app.cancel(first.id, ALICE)
            while store.renews < 2:  # the heartbeat goes on after the stop
                store.renewed.clear()
                await asyncio.wait_for(store.renewed.wait(), TIMEOUT)
            held = await app.get(first.id, ALICE)
            assert held.claim is not None
            assert not held.claim.ended
            assert TaskStatus.PENDING == (await app.get(second.id, ALICE)).status
            assert [] == await store.claim_next("elsewhere", 30.0, queues=["ledger"],
                                                exclusive=["ledger"])
            proceed.set()
            stopped = await until(app, first.id, ALICE, lambda s: s.terminal
                                  and s.claim is not None and s.claim.ended)
            done = await app.wait(second.id, ALICE, timeout=TIMEOUT)
    expected = ((TaskStatus.FAILED, "TaskTimeout") if cause == "timeout"
                else (TaskStatus.CANCELLED, "Cancelled"))
    assert expected == (stopped.status, stopped.error.type if stopped.error else None)
    assert (TaskStatus.COMPLETED, 1) == (done.status, peak[0])


async def test_a_worker_that_dies_inside_its_block_says_so_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A background worker of ``async with app.worker()`` whose claim loop dies MUST log
    an ERROR at once naming the error — the block goes on without a worker — and raise it
    again when the block ends."""
    import logging

    from tasks_core import Worker

    class Dies(Worker):
        async def _claim_loop(self, store: Any) -> None:
            raise RuntimeError("boom")

    caplog.set_level(logging.ERROR, logger="tasks_core.worker")
    app = App(store=MemoryStore())
    logged: list[str] = []
    async def serve() -> None:
        nonlocal logged
        async with Dies(app, poll_interval=0.02, reap_interval=None) as worker:
            await asyncio.wait({worker._main} if worker._main else set())
            logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]

    async with app:
        with pytest.raises(RuntimeError, match="boom"):
            await serve()
    assert ["worker stopped: RuntimeError: boom (raised again when its async with block "
            "ends)"] == logged
