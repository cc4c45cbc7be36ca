"""The worker: running handlers, contexts, concurrency, claiming and waking (memory store)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from _runtime_kit import (
    ALICE,
    BOB,
    TIMEOUT,
    CapabilityStore,
    DelegatingStore,
    RecordingStore,
    fast_worker,
    make_app,
    until,
)
from tasks_contract_tests._kit import submitted_in_order
from tasks_core import (
    App,
    CapabilityNotSupported,
    InvalidInput,
    ManualClock,
    Queue,
    Snapshot,
    TaskContext,
    TaskStatus,
    Worker,
    rules,
)
from tasks_core.runtime import worker as worker_module
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")

LEASED = frozenset({TaskStatus.RUNNING, TaskStatus.CLAIMED})
"""A live lease: started (``running``) or held ahead of a slot (``claimed``)."""


async def test_async_and_sync_handlers_complete_with_their_results() -> None:
    """An async handler MUST run on the worker's loop thread and a sync one in another
    thread; both results MUST be stored."""
    app = make_app()
    threads: dict[str, str] = {}

    @app.task
    async def add(ctx: TaskContext, a: int, b: int) -> int:
        threads["async"] = threading.current_thread().name
        return a + b

    @app.task
    def mul(ctx: TaskContext, a: int, b: int) -> int:
        threads["sync"] = threading.current_thread().name
        return a * b

    async with app:
        s = await app.submit(add, {"a": 2, "b": 3}, ALICE)
        m = await app.submit(mul, {"a": 2, "b": 3}, ALICE)
        async with fast_worker(app):
            done = [await app.wait(t.id, ALICE, timeout=TIMEOUT) for t in (s, m)]
    assert [5, 6] == [d.result for d in done]
    assert [TaskStatus.COMPLETED] * 2 == [d.status for d in done]
    assert threading.current_thread().name == threads["async"]
    assert threading.current_thread().name != threads["sync"]


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_handlers_do_not_inherit_the_submitters_context_variables(kind: str) -> None:
    """A handler MUST run in a fresh contextvars.Context: a variable the submitter (and
    the worker's creator) set is not visible, and what the handler sets does not leak
    back."""
    app = make_app()

    def body(ctx: TaskContext) -> str:
        seen = REQUEST_ID.get()
        REQUEST_ID.set("set-by-handler")
        return seen

    if kind == "async":

        @app.task(name="probe")
        async def probe_async(ctx: TaskContext) -> str:
            return body(ctx)
    else:

        @app.task(name="probe")
        def probe_sync(ctx: TaskContext) -> str:
            return body(ctx)

    async with app:
        REQUEST_ID.set("submitter-request-42")
        t = await app.submit("probe", None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
        assert "unset" == done.result
        assert "submitter-request-42" == REQUEST_ID.get()


async def test_context_describes_the_run() -> None:
    """TaskContext MUST carry the task id, input, attempt, deliveries and an idempotency
    key stable for the run (the submitter's when given)."""
    app = make_app()
    seen: dict[str, dict[str, Any]] = {}

    @app.task
    async def probe(ctx: TaskContext, x: int) -> None:
        seen[ctx.task_id] = ({"id": ctx.task_id, "input": ctx.input, "attempt": ctx.attempt,
                     "deliveries": ctx.deliveries, "key": ctx.idempotency_key,
                     "name": ctx.name, "queue": ctx.queue, "owner": ctx.owner})

    async with app:
        a = await app.submit(probe, {"x": 1}, ALICE)
        b = await app.submit(probe, {"x": 2}, ALICE, idempotency_key="pay-7")
        async with fast_worker(app, concurrency=1):
            for t in (a, b):
                await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert {"id": a.id, "input": {"x": 1}, "attempt": 1, "deliveries": 1,
            "key": f"{a.id}:{a.run_id}", "name": "probe", "queue": "default",
            "owner": ALICE} == seen[a.id]
    assert "pay-7" == seen[b.id]["key"]


async def test_progress_reaches_the_store() -> None:
    """``ctx.progress`` MUST be stored (throttled) and its last value kept after the end."""
    app = make_app()

    @app.task
    def job(ctx: TaskContext) -> None:
        for value in range(0, 101, 10):
            ctx.progress(value, f"at {value}")

    async with app:
        t = await app.submit(job, None, ALICE)
        async with fast_worker(app, progress_interval=60):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert done.progress is not None
    assert (100.0, "at 100") == (done.progress.value, done.progress.message)


@pytest.mark.parametrize("value", [101, -1, float("nan"), True, "50"])
async def test_progress_out_of_range_raises_in_the_handler(value: Any) -> None:
    """A progress value outside 0..100, not finite or not a number (a bool, a string)
    MUST raise InvalidInput in the handler."""
    app = make_app()

    @app.task
    async def job(ctx: TaskContext) -> str:
        try:
            ctx.progress(value)
        except InvalidInput:
            return "refused"
        return "accepted"

    async with app:
        t = await app.submit(job, None, ALICE)
        async with fast_worker(app):
            assert "refused" == (await app.wait(t.id, ALICE, timeout=TIMEOUT)).result


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


async def test_a_worker_write_that_meets_a_new_revision_retries_and_lands() -> None:
    """A worker event sent at a stale revision (a watcher joined meanwhile) MUST be retried
    at the current revision and applied, with the same event id."""
    store = RecordingStore(MemoryStore(clock=ManualClock()))
    app = make_app(store=store)
    started = asyncio.Event()
    proceed = asyncio.Event()

    @app.task
    async def job(ctx: TaskContext) -> str:
        started.set()
        await proceed.wait()
        return "ok"

    async with app:
        t = await app.submit(job, None, ALICE, key="k")
        async with fast_worker(app):
            await asyncio.wait_for(started.wait(), TIMEOUT)
            joined = await app.submit(job, None, ALICE, key="k", watchers=[BOB])
            assert 1 == joined.snapshot.revision
            proceed.set()
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    writes = [r for r in store.records if r.event.kind == "completed"]
    assert ["RevisionConflict", "applied"] == [
        type(r.error).__name__ if r.error else r.result.outcome  # type: ignore[union-attr]
        for r in writes
    ]
    assert 1 == len({r.event.event_id for r in writes})
    assert ("ok", 2) == (done.result, done.revision)


async def test_heartbeats_keep_a_long_run_leased() -> None:
    """Heartbeats MUST renew the lease, so a run longer than one lease stays with its
    worker (no second delivery)."""
    clock = ManualClock()
    app = make_app(clock)
    started = asyncio.Event()
    proceed = asyncio.Event()

    @app.task
    async def long(ctx: TaskContext) -> int:
        started.set()
        await proceed.wait()
        return ctx.deliveries

    async with app:
        t = await app.submit(long, None, ALICE)
        async with fast_worker(app, lease_for=0.3):
            await asyncio.wait_for(started.wait(), TIMEOUT)
            for _ in range(4):  # 4 x 0.2 s of store time: well past one 0.3 s lease
                renewed_after = clock.now() + timedelta(seconds=0.25)

                def renewed(s: Snapshot, after: datetime = renewed_after) -> bool:
                    return s.claim is not None and s.claim.expires_at > after

                await until(app, t.id, ALICE, renewed)
                clock.advance(0.2)
            proceed.set()
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert (TaskStatus.COMPLETED, 1, 1) == (done.status, done.result, done.deliveries)


def test_worker_refuses_undeclared_queues_and_bad_settings() -> None:
    """Serving an undeclared queue, or a non-positive setting, MUST raise InvalidInput."""
    app = make_app()
    with pytest.raises(InvalidInput, match="undeclared"):
        Worker(app, queues=["nope"])
    with pytest.raises(InvalidInput):
        Worker(app, concurrency=0)
    with pytest.raises(InvalidInput):
        Worker(app, lease_for=0)
    with pytest.raises(InvalidInput):
        Worker(app, queues="default")


async def test_run_worker_serves_until_cancelled() -> None:
    """``app.run_worker(...)`` MUST run a worker until cancelled."""
    app = make_app()

    @app.task
    async def job(ctx: TaskContext) -> str:
        return "ok"

    async with app:
        serving = asyncio.create_task(app.run_worker(poll_interval=0.02, reap_interval=None))
        t = await app.submit(job, None, ALICE)
        assert "ok" == (await app.wait(t.id, ALICE, timeout=TIMEOUT)).result
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving


# -- prefetch ------------------------------------------------------------------------------


class _Gated:
    """An app on a memory store with a manual clock, and a task whose runs record their
    start and wait for ``gate``."""

    def __init__(self, *, recording: bool = False) -> None:
        self.clock = ManualClock()
        memory = MemoryStore(clock=self.clock)
        self.store = RecordingStore(memory) if recording else memory
        self.app = make_app(store=self.store)
        self.started: list[str] = []
        self.gate = asyncio.Event()

        @self.app.task(name="gated")
        async def gated(ctx: TaskContext) -> None:
            self.started.append(ctx.task_id)
            await self.gate.wait()

        self.job = gated

    async def submit(self, count: int) -> list[str]:
        """Submit ``count`` tasks a millisecond apart: claims take them in this order."""
        return await submitted_in_order(self.app, self.job, self.clock, count)

    async def finish(self, ids: list[str]) -> None:
        """Open the gate and wait until every task of ``ids`` has ended."""
        self.gate.set()
        for task_id in ids:
            await self.app.wait(task_id, ALICE, timeout=TIMEOUT)


async def _claimed_ids(app: App, ids: list[str]) -> list[str]:
    """The tasks of ``ids`` whose lease is live now (claimed, started or not)."""
    return [i for i in ids if (await app.get(i, ALICE)).status in LEASED]


async def test_prefetch_claims_beyond_the_free_slots_and_starts_held_claims_oldest_first() -> None:
    """With ``prefetch=N`` the worker MUST claim up to N tasks beyond its free slots while
    its handlers run, and start them oldest first as slots free."""
    g = _Gated(recording=True)
    app = g.app

    async with app:
        ids = await g.submit(6)
        async with fast_worker(app, concurrency=2, prefetch=2) as worker:
            await until(app, ids[3], ALICE, lambda s: s.status in LEASED)
            assert g.started == ids[:2]
            assert await _claimed_ids(app, ids) == ids[:4]
            assert [claim.snapshot.id for _, claim in worker._held] == ids[2:4]
            assert [(await app.get(i, ALICE)).status for i in ids[:4]] == [
                TaskStatus.RUNNING, TaskStatus.RUNNING, TaskStatus.CLAIMED, TaskStatus.CLAIMED]
            g.gate.set()
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    assert g.started == ids
    assert isinstance(g.store, RecordingStore)
    assert g.store.claim_limits[0] == 4
    assert all(1 <= limit <= 4 for limit in g.store.claim_limits)


async def test_a_claim_held_for_a_heartbeat_interval_is_released_and_prefetch_pauses() -> None:
    """A held claim that finds no free slot within ``lease_for / 3`` MUST be released
    unstarted (another worker may take it), and the worker MUST claim no further ahead
    until one of its runs ends — a long handler does not burn the task's deliveries."""
    g = _Gated()
    app = g.app

    async with app:
        first, second = await g.submit(2)
        async with fast_worker(app, concurrency=1, prefetch=1, lease_for=0.3) as worker:
            released = await until(app, second, ALICE,
                                   lambda s: s.claim is not None and s.claim.ended)
            assert released.status == TaskStatus.PENDING
            assert released.deliveries == 1
            assert g.started == [first]
            assert not worker._held
            assert await _claimed_ids(app, [second]) == []  # not claimed again
            g.gate.set()
            done = await app.wait(second, ALICE, timeout=TIMEOUT)
    assert done.status == TaskStatus.COMPLETED
    assert done.deliveries == 2
    assert g.started == [first, second]


async def test_a_shutdown_releases_held_claims_unstarted() -> None:
    """Claims held when a shutdown begins MUST be released unstarted: claimable again at
    once, by any worker."""
    g = _Gated()
    app = g.app

    async with app:
        ids = await g.submit(3)
        worker = fast_worker(app, concurrency=1, prefetch=2)
        async with worker:
            await until(app, ids[2], ALICE, lambda s: s.status in LEASED)
            g.gate.set()  # the running handler ends during the drain
            assert await worker.shutdown(drain_timeout=TIMEOUT)
        for task_id in ids[1:]:
            held = await app.get(task_id, ALICE)
            assert held.status == TaskStatus.PENDING
            assert held.claim is not None
            assert held.claim.ended
    assert g.started == ids[:1]


async def test_a_held_claim_of_a_task_cancelled_through_the_app_is_never_started() -> None:
    """A cancel recorded through the worker's app while the task's claim is held MUST keep
    the handler from ever running it: the next held claim starts in its place."""
    g = _Gated()
    app = g.app

    async with app:
        first, second = await g.submit(2)
        async with fast_worker(app, concurrency=1, prefetch=1) as worker:
            await until(app, second, ALICE, lambda s: s.status in LEASED)
            assert [claim.snapshot.id for _, claim in worker._held] == [second]
            await app.cancel(second, ALICE)
            assert not worker._held
            g.clock.advance(0.001)
            (third,) = await g.submit(1)
            await until(app, third, ALICE, lambda s: s.status in LEASED)
            g.gate.set()
            assert (await app.wait(third, ALICE, timeout=TIMEOUT)).status == \
                TaskStatus.COMPLETED
        assert (await app.get(second, ALICE)).status == TaskStatus.CANCELLED
    assert g.started == [first, third]


async def test_prefetch_never_claims_ahead_for_a_queue_with_a_concurrency_limit() -> None:
    """A queue's own concurrency limit MUST hold with prefetch: its claims ask for its free
    slots only."""
    clock = ManualClock()
    store = RecordingStore(MemoryStore(clock=clock))
    app = make_app(store=store)
    app.declare_queue(Queue("one", concurrency=1))
    started: list[str] = []
    gate = asyncio.Event()

    @app.task(name="limited", queue="one")
    async def limited(ctx: TaskContext) -> None:
        started.append(ctx.task_id)
        await gate.wait()

    async with app:
        ids = await submitted_in_order(app, limited, clock, 3)
        async with fast_worker(app, queues=["one"], concurrency=4, prefetch=4):
            await until(app, ids[0], ALICE, lambda s: s.status in LEASED)
            assert await _claimed_ids(app, ids) == ids[:1]
            gate.set()
            for task_id in ids:
                await app.wait(task_id, ALICE, timeout=TIMEOUT)
    assert started == ids
    assert set(store.claim_limits) == {1}


@contextlib.asynccontextmanager
async def _auto_worker_after_short_runs(
    g: _Gated, count: int = 4
) -> AsyncIterator[tuple[Worker, list[str]]]:
    """A running ``prefetch="auto"`` worker of two slots (every run counts as short) that
    has run two tasks, with ``count`` more submitted while the gate is shut: it and
    those."""
    worker = fast_worker(g.app, concurrency=2)
    assert worker.prefetch == "auto"
    worker._short_run = 60.0
    g.gate.set()
    warm = await g.submit(2)
    async with worker:
        await g.finish(warm)
        g.gate.clear()
        yield worker, await g.submit(count)


async def test_auto_prefetch_claims_nothing_ahead_before_runs_have_proven_short() -> None:
    """A worker with the default ``prefetch="auto"`` MUST claim no more than its free
    slots until ``concurrency`` runs in a row have held their slot only briefly."""
    g = _Gated(recording=True)
    async with g.app:
        ids = await g.submit(4)
        async with fast_worker(g.app, concurrency=2) as worker:
            worker._short_run = 60.0
            await until(g.app, ids[1], ALICE, lambda s: s.status in LEASED)
            assert await _claimed_ids(g.app, ids) == ids[:2]
            assert not worker._held
            await g.finish(ids)
    assert isinstance(g.store, RecordingStore)
    assert g.store.claim_limits[0] == 2


async def test_auto_prefetch_claims_ahead_while_runs_are_short() -> None:
    """After ``concurrency`` short runs in a row, ``prefetch="auto"`` MUST claim up to
    ``AUTO_AHEAD * concurrency`` tasks beyond the free slots, no more, and start them
    oldest first."""
    ahead = worker_module.AUTO_AHEAD * 2
    g = _Gated()
    async with g.app, _auto_worker_after_short_runs(g, 2 + ahead + 2) as (worker, ids):
        await until(g.app, ids[1 + ahead], ALICE, lambda s: s.status in LEASED)
        assert g.started[-2:] == ids[:2]
        assert [claim.snapshot.id for _, claim in worker._held] == ids[2:2 + ahead]
        assert await _claimed_ids(g.app, ids) == ids[:2 + ahead]
        await g.finish(ids)
    assert g.started[-len(ids):] == ids


async def test_auto_prefetch_stops_claiming_ahead_once_a_run_is_long() -> None:
    """``prefetch="auto"`` MUST claim nothing ahead while a run in a slot has held it
    longer than a short run, nor after such a run ended, until ``concurrency`` short runs
    in a row have ended again."""
    g = _Gated()
    async with g.app, _auto_worker_after_short_runs(g) as (worker, ids):
        await until(g.app, ids[3], ALICE, lambda s: s.status in LEASED)
        worker._short_run = 0.0  # the runs in the slots are long from now on
        assert worker._ahead() == 0
        await g.finish(ids)
        g.gate.clear()
        later = await g.submit(4)
        await until(g.app, later[1], ALICE, lambda s: s.status in LEASED)
        assert await _claimed_ids(g.app, later) == later[:2]
        assert not worker._held
        worker._short_run = 60.0  # short again: two short runs in a row re-arm it
        await g.finish(later)
        g.gate.clear()
        again = await g.submit(4)
        await until(g.app, again[3], ALICE, lambda s: s.status in LEASED)
        assert [claim.snapshot.id for _, claim in worker._held] == again[2:]
        await g.finish(again)


@pytest.mark.parametrize("prefetch", [-1, 1001, 1.5, True, "always", None])
def test_prefetch_must_be_auto_or_a_small_non_negative_integer(prefetch: Any) -> None:
    with pytest.raises(InvalidInput, match="prefetch"):
        Worker(make_app(), prefetch=prefetch)
