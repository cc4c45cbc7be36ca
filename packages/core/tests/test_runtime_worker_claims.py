"""The worker's claims: concurrency bounds, FIFO order, exclusive queues, how many tasks a
claim asks for, claims in flight at once, wakeups and polling (memory store)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _runtime_kit import (
    ALICE,
    LEASED,
    TIMEOUT,
    CapabilityStore,
    DelegatingStore,
    RecordingStore,
    fast_worker,
    make_app,
    until,
)
from tasks_core import (
    App,
    CapabilityNotSupported,
    ManualClock,
    Queue,
    TaskContext,
    Worker,
    rules,
)
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


async def _running_at_most(
    app: App, clock: ManualClock, n_tasks: int, **worker: Any
) -> tuple[int, list[int]]:
    """Run ``n_tasks`` (submitted 1 ms apart) that overlap as much as the worker lets
    them; return the highest number running at once and the start order."""
    running = 0
    highest = 0
    order: list[int] = []
    gates: list[asyncio.Event] = [asyncio.Event() for _ in range(n_tasks)]
    started = asyncio.Condition()

    @app.task(queue="q")
    async def job(ctx: TaskContext, n: int) -> None:
        nonlocal running, highest
        async with started:
            running += 1
            highest = max(highest, running)
            order.append(n)
            started.notify_all()
        await gates[n].wait()
        running -= 1

    async with app:
        ids = []
        for n in range(n_tasks):
            ids.append((await app.submit(job, {"n": n}, ALICE)).id)
            clock.advance(0.001)
        async with fast_worker(app, **worker):
            for n in range(n_tasks):
                def reached(n: int = n) -> bool:
                    return len(order) > n

                async with started:
                    await asyncio.wait_for(started.wait_for(reached), TIMEOUT)
                gates[order[n]].set()
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    return highest, order


async def test_worker_concurrency_bounds_runs_at_once() -> None:
    """No more than ``concurrency`` runs MUST overlap; the default MUST be 8."""
    clock = ManualClock()
    app = make_app(clock)
    assert 8 == Worker(app).concurrency
    highest, _ = await _running_at_most(app, clock, 6, concurrency=3)
    assert 3 == highest


async def test_queue_concurrency_one_runs_sequentially_in_fifo_order() -> None:
    """A queue with concurrency 1 MUST run one task at a time, oldest first."""
    clock = ManualClock()
    app = make_app(clock, queues=[Queue("q", concurrency=1)])
    highest, order = await _running_at_most(app, clock, 5, concurrency=8)
    assert (1, [0, 1, 2, 3, 4]) == (highest, order)


async def test_fifo_holds_for_tasks_created_in_the_same_store_millisecond() -> None:
    """Tasks submitted one after another without a key MUST run oldest first even when
    the store clock gives them the same creation instant: claims order by
    ``(created_at, id)``, and random ids grow in submission order."""
    clock = ManualClock()  # never advanced: every task is created at the same instant
    app = make_app(clock, queues=[Queue("q", concurrency=1)])
    order: list[int] = []

    @app.task(queue="q")
    async def job(ctx: TaskContext, n: int) -> None:
        order.append(n)

    async with app:
        ids = [(await app.submit(job, {"n": n}, ALICE)).id for n in range(20)]
        async with fast_worker(app):
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    assert list(range(20)) == order


async def test_worker_queue_concurrency_overrides_the_declaration() -> None:
    """``Worker(queue_concurrency=…)`` MUST override the queue's declared concurrency."""
    clock = ManualClock()
    app = make_app(clock, queues=[Queue("q", concurrency=1)])
    highest, _ = await _running_at_most(app, clock, 4, concurrency=8,
                                        queue_concurrency={"q": 2})
    assert 2 == highest


async def test_exclusive_queue_runs_one_task_across_workers() -> None:
    """An exclusive queue MUST run one task at a time across several workers."""
    app = make_app(queues=[Queue("q", exclusive=True)])
    running = 0
    highest = 0
    done = 0

    @app.task(queue="q")
    async def job(ctx: TaskContext) -> None:
        nonlocal running, highest, done
        running += 1
        highest = max(highest, running)
        for _ in range(5):
            await asyncio.sleep(0)
        running -= 1
        done += 1

    async with app:
        ids = [(await app.submit(job, None, ALICE)).id for _ in range(6)]
        async with fast_worker(app, worker_id="w1"), fast_worker(app, worker_id="w2"):
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    assert (1, 6) == (highest, done)


async def test_exclusive_queue_on_a_store_without_the_capability_is_refused() -> None:
    """A worker serving an exclusive queue MUST refuse to start on a store without
    ``exclusive_queues`` (CapabilityNotSupported), instead of running it in parallel."""
    store = CapabilityStore(MemoryStore(clock=ManualClock()), exclusive_queues=False)
    app = make_app(store=store, queues=[Queue("q", exclusive=True)])
    async with app:
        with pytest.raises(CapabilityNotSupported):
            await fast_worker(app).run()


async def test_claims_ask_for_the_free_slots_only() -> None:
    """With ``prefetch=0`` ``claim_next`` MUST be asked for at most the free slots."""
    store = RecordingStore(MemoryStore(clock=ManualClock()))
    app = make_app(store=store)
    gate = asyncio.Event()
    started = 0
    all_started = asyncio.Event()

    @app.task
    async def job(ctx: TaskContext) -> None:
        nonlocal started
        started += 1
        if started == 3:
            all_started.set()
        await gate.wait()

    async with app:
        ids = [(await app.submit(job, None, ALICE)).id for _ in range(5)]
        async with fast_worker(app, concurrency=3, prefetch=0):
            await asyncio.wait_for(all_started.wait(), TIMEOUT)
            gate.set()
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    assert 3 == store.claim_limits[0]
    assert all(1 <= limit <= 3 for limit in store.claim_limits)


async def test_a_claim_never_asks_for_more_than_a_store_batch() -> None:
    """A worker with more free slots than ``rules.MAX_BATCH`` MUST ask ``claim_next`` for
    at most ``MAX_BATCH`` tasks at once (a larger limit is refused by every store), and
    still run every task."""
    store = RecordingStore(MemoryStore(clock=ManualClock()))
    app = make_app(store=store)

    @app.task
    async def job(ctx: TaskContext) -> None:
        return None

    async with app:
        ids = [(await app.submit(job, None, ALICE)).id for _ in range(3)]
        async with fast_worker(app, concurrency=rules.MAX_BATCH + 500, prefetch=0):
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    assert store.claim_limits
    assert max(store.claim_limits) == rules.MAX_BATCH


class _OverlapStore(DelegatingStore):
    """Counts the ``claim_next`` calls in flight at once; while ``gate`` is closed a call
    waits at it before claiming anything (only calls of the ``gated`` queue, if given)."""

    def __init__(self, inner: Any, gated: str | None = None) -> None:
        super().__init__(inner)
        self.gated = gated
        """Only claims of this queue wait at the gate (``None``: every claim)."""
        self.gate = asyncio.Event()
        self.gate.set()
        self.in_flight = 0
        self.most = 0
        self.waiting = asyncio.Condition()

    async def claim_next(self, *args: Any, **kwargs: Any) -> Any:
        async with self.waiting:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.waiting.notify_all()
        try:
            if self.gated is None or self.gated in kwargs["queues"]:
                await self.gate.wait()
            return await self.inner.claim_next(*args, **kwargs)
        finally:
            self.in_flight -= 1

    async def until_in_flight(self, count: int) -> None:
        async with self.waiting:
            await asyncio.wait_for(self.waiting.wait_for(lambda: self.in_flight >= count),
                                   TIMEOUT)


async def test_claims_of_open_queues_overlap_within_the_free_slots() -> None:
    """A worker serving only queues without a concurrency limit MUST ask for the next
    claim while an earlier one is still in flight (slots freed meanwhile), and never run
    more than ``concurrency`` handlers at once (four slots, ``prefetch=0``, eight tasks:
    the first four run until released, two at a time, while later claims wait)."""
    store = _OverlapStore(MemoryStore(clock=ManualClock()))
    app = make_app(store=store, queues=[Queue("a")])
    releases = [asyncio.Event() for _ in range(8)]
    started: list[int] = []
    running = highest = 0

    @app.task(queue="a")
    async def job(ctx: TaskContext, n: int) -> None:
        nonlocal running, highest
        started.append(n)
        running += 1
        highest = max(highest, running)
        await releases[n].wait()
        running -= 1

    async with app:
        ids = [(await app.submit(job, {"n": n}, ALICE)).id for n in range(8)]
        async with fast_worker(app, concurrency=4, prefetch=0):
            for task_id in ids[:4]:
                await until(app, task_id, ALICE, lambda s: s.status in LEASED)
            store.gate.clear()
            first = list(started)
            releases[first[0]].set()
            releases[first[1]].set()
            await store.until_in_flight(1)  # two slots free: a claim is asked for them
            releases[first[2]].set()
            releases[first[3]].set()
            await store.until_in_flight(2)  # two more free: asked while the first waits
            most = store.most
            store.gate.set()
            for n in range(8):
                releases[n].set()
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    assert (2, 4) == (most, highest)


async def test_one_claim_in_flight_while_claiming_further_ahead_than_the_slots() -> None:
    """A worker that claims more than ``concurrency`` ahead MUST keep one claim of the
    open queues in flight, not ask a second while the first is out: the claims it holds
    cover the first's round trip, and one bigger claim costs fewer than two (two slots,
    ``prefetch=4``: six claimed; two runs end while the next claim waits)."""
    store = _OverlapStore(MemoryStore(clock=ManualClock()))
    app = make_app(store=store, queues=[Queue("a")])
    releases = [asyncio.Event() for _ in range(10)]
    started: list[int] = []

    @app.task(queue="a")
    async def job(ctx: TaskContext, n: int) -> None:
        started.append(n)
        await releases[n].wait()

    async with app:
        ids = [(await app.submit(job, {"n": n}, ALICE)).id for n in range(10)]
        async with fast_worker(app, concurrency=2, prefetch=4) as worker:
            for task_id in ids[:2]:
                await until(app, task_id, ALICE, lambda s: s.status in LEASED)
            assert len(worker._held) == 4
            store.gate.clear()
            planned_with_two_held = asyncio.Event()
            plan = worker._plan

            def planned() -> Any:  # the claim loop plans after the second run ended
                if len(worker._held) == 2:
                    planned_with_two_held.set()
                return plan()

            worker._plan = planned  # type: ignore[method-assign]
            releases[started[0]].set()
            await store.until_in_flight(1)  # a slot freed, a held claim started: room
            releases[started[1]].set()
            await asyncio.wait_for(planned_with_two_held.wait(), TIMEOUT)
            asking = len(worker._asking)
            store.gate.set()
            for event in releases:
                event.set()
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    assert (1, 1) == (asking, store.most)


async def test_claims_never_overlap_in_a_worker_serving_a_limited_queue() -> None:
    """A worker serving a queue with a concurrency limit MUST claim one call at a time: a
    limited queue's claim starts its tasks at once, so an open queue's claim answering
    meanwhile could take its slot (two slots, ``prefetch=0``: ``b`` limited to one)."""
    store = _OverlapStore(MemoryStore(clock=ManualClock()), gated="a")
    app = make_app(store=store, queues=[Queue("a"), Queue("b", concurrency=1)])
    releases = {name: asyncio.Event() for name in ("a1", "a2", "b1", "b2")}
    running = highest = 0

    async def job(ctx: TaskContext, name: str) -> None:
        nonlocal running, highest
        running += 1
        highest = max(highest, running)
        await releases[name].wait()
        running -= 1

    app.task(name="a", queue="a")(job)
    app.task(name="b", queue="b")(job)
    async with app:
        ids = {name: (await app.submit(name[0], {"name": name}, ALICE)).id
               for name in ("b1", "b2", "a1", "a2")}
        async with fast_worker(app, concurrency=2, prefetch=0, queues=["a", "b"]) as worker:
            for name in ("b1", "a1"):
                await until(app, ids[name], ALICE, lambda s: s.status in LEASED)
            store.gate.clear()
            releases["a1"].set()
            await store.until_in_flight(1)  # a claim of queue a waits at the gate
            b_free = asyncio.Event()
            plan = worker._plan

            def planned() -> Any:  # the claim loop plans with b's slot free
                if worker._active["b"] == 0:
                    b_free.set()
                return plan()

            worker._plan = planned  # type: ignore[method-assign]
            releases["b1"].set()
            await asyncio.wait_for(b_free.wait(), TIMEOUT)
            most = store.most
            store.gate.set()
            for event in releases.values():
                event.set()
            for task_id in ids.values():
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    assert (1, 2) == (most, highest)


async def test_worker_uses_store_wakeups_when_offered() -> None:
    """On a store with ``wakeups`` the idle worker MUST wait with ``wait_for_work``."""
    store = RecordingStore(MemoryStore(clock=ManualClock()))
    app = make_app(store=store)

    @app.task
    async def job(ctx: TaskContext) -> str:
        return "ok"

    async with app:
        async with fast_worker(app) as worker:
            await asyncio.wait_for(store.idle.wait(), TIMEOUT)  # idle on the store's wakeup
            t = await app.submit(job, None, ALICE)
            assert "ok" == (await app.wait(t.id, ALICE, timeout=TIMEOUT)).result
        assert worker.claimed == 1


async def test_an_idle_worker_waits_for_work_without_claiming_again() -> None:
    """A worker whose claims came back empty MUST wait (here on the store's wakeup, which
    never comes) and not claim again: however long the event loop runs meanwhile, no
    ``claim_next`` is asked until something changes."""
    store = RecordingStore(MemoryStore(clock=ManualClock()))
    app = make_app(store=store)
    async with app:
        async with fast_worker(app, poll_interval=60.0, min_poll=60.0):
            await asyncio.wait_for(store.idle.wait(), TIMEOUT)
            claims = len(store.claim_limits)
            for _ in range(100):  # many turns of the event loop, no time needed
                await asyncio.sleep(0)
            assert claims == len(store.claim_limits)
            assert 1 == store.wakeup_waits


async def test_worker_polls_a_store_without_wakeups() -> None:
    """On a store without ``wakeups`` the worker MUST never call ``wait_for_work`` and
    still find work submitted by another app (polling)."""
    inner = MemoryStore(clock=ManualClock())
    store = RecordingStore(CapabilityStore(inner, wakeups=False))
    app = make_app(store=store)
    client = make_app(store=inner)

    @app.task
    async def job(ctx: TaskContext) -> str:
        return "ok"

    async with app, client:
        async with fast_worker(app):
            t = await client.submit("job", None, ALICE)
            assert "ok" == (await client.wait(t.id, ALICE, timeout=TIMEOUT)).result
    assert 0 == store.wakeup_waits
