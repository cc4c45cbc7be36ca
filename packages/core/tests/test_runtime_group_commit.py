"""Group commit: a worker on a store with ``batch_transitions`` writes its runs' terminal
events together (``transition_many``), each still fenced by its own lease and revision."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import pytest
from _runtime_kit import (
    ALICE,
    TIMEOUT,
    CapabilityStore,
    RecordingStore,
    fast_worker,
    make_app,
    until,
)
from tasks_core import (
    App,
    InvalidInput,
    LeaseLost,
    ManualClock,
    StoreUnavailable,
    TaskContext,
    TasksError,
    TaskStatus,
    Transition,
    Worker,
)
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio

N = 4


class _Gate:
    """The handlers' gate: each run announces its start, then waits for ``open``."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.started: list[str] = []
        self._arrived = asyncio.Event()

    def arrive(self, task_id: str) -> None:
        self.started.append(task_id)
        self._arrived.set()

    async def all_started(self, count: int) -> None:
        async with asyncio.timeout(TIMEOUT):
            while len(self.started) < count:
                self._arrived.clear()
                await self._arrived.wait()

    def set(self) -> None:
        self.open.set()


def _gated_app(store: Any) -> tuple[App, _Gate]:
    """An app whose handler ``job`` announces itself and waits for the gate."""
    app = make_app(store=store)
    gate = _Gate()

    @app.task
    async def job(ctx: TaskContext) -> str:
        gate.arrive(ctx.task_id)
        await gate.open.wait()
        return ctx.task_id

    return app, gate


async def test_terminal_events_of_runs_that_end_together_are_committed_as_one_group() -> None:
    """Runs whose handlers end together MUST have their completions written by one
    ``transition_many`` (once no handler of the worker is running), every task
    completed with its own result."""
    store = RecordingStore(MemoryStore(clock=ManualClock()))
    app, gate = _gated_app(store)
    async with app:
        ids = [(await app.submit("job", None, ALICE)).id for _ in range(N)]
        async with fast_worker(app, concurrency=N, batch_window=1.0):
            await gate.all_started(N)
            gate.set()
            done = [await app.wait(i, ALICE, timeout=TIMEOUT) for i in ids]
    assert [N] == store.groups
    assert [(TaskStatus.COMPLETED, i) for i in ids] == [(d.status, d.result) for d in done]
    assert sorted(ids) == sorted(r.task_id for r in store.records if r.event.kind == "completed")


async def test_a_stale_lease_in_a_group_is_refused_while_the_others_apply() -> None:
    """When one run's lease became stale while its handler ran, its completion MUST be
    refused (``LeaseLost``) inside the group, and the other completions of the same group
    MUST apply; the fenced task keeps running under the lease that replaced it."""
    store = RecordingStore(MemoryStore(clock=ManualClock()))
    app, gate = _gated_app(store)
    async with app:
        ids = [(await app.submit("job", None, ALICE)).id for _ in range(N)]
        async with fast_worker(app, concurrency=N, batch_window=1.0) as worker:
            await gate.all_started(N)
            stolen = ids[1]
            renewed = await store.inner.renew(worker.runs[stolen].cell.lease, 30)  # old: stale
            gate.set()
            fenced = await store.wait_for(
                lambda r: r.task_id == stolen and r.event.kind == "completed"
            )
            for other in ids:
                if other != stolen:
                    await app.wait(other, ALICE, timeout=TIMEOUT)
        assert [N] == store.groups
        assert isinstance(fenced.error, LeaseLost)
        applied = [r for r in store.records if isinstance(r.result, Transition)]
        assert sorted(set(ids) - {stolen}) == sorted(r.task_id for r in applied)
        assert {"applied"} == {r.result.outcome for r in applied if r.result is not None}
        held = await app.get(stolen, ALICE)
        assert (TaskStatus.RUNNING, 0, renewed.lease.generation) == (
            held.status, held.revision, held.claim and held.claim.generation
        )
        assert [] == await app.history(stolen, ALICE)


class _FailingOnce(RecordingStore):
    """The first ``transition_many`` fails as a whole (``StoreUnavailable``)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.failed = 0

    async def transition_many(
        self, items: Sequence[tuple[str, int, Any, Any]]
    ) -> list[Transition | TasksError]:
        if not self.failed:
            self.failed = len(items)
            raise StoreUnavailable("the database is unavailable")
        return await super().transition_many(items)


async def test_a_group_that_fails_as_a_whole_is_written_again() -> None:
    """A group refused as a whole (``StoreUnavailable``: nothing written) MUST be sent
    again by its runs, and every task MUST end completed exactly once."""
    store = _FailingOnce(MemoryStore(clock=ManualClock()))
    app, gate = _gated_app(store)
    async with app:
        ids = [(await app.submit("job", None, ALICE)).id for _ in range(N)]
        async with fast_worker(app, concurrency=N, batch_window=1.0):
            await gate.all_started(N)
            gate.set()
            done = [await app.wait(i, ALICE, timeout=TIMEOUT) for i in ids]
        histories = [await app.history(i, ALICE) for i in ids]
    assert N == store.failed
    assert [TaskStatus.COMPLETED] * N == [d.status for d in done]
    assert [["completed"]] * N == [[r.kind for r in h] for h in histories]


class _HeldCommits(RecordingStore):
    """``transition_many`` waits for ``open`` (never set: the worker dies first), a group
    commit slower than the runs; ``entered`` is set once a group is sent."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.open = asyncio.Event()
        self.entered = asyncio.Event()

    async def transition_many(
        self, items: Sequence[tuple[str, int, Any, Any]]
    ) -> list[Transition | TasksError]:
        self.entered.set()
        await self.open.wait()
        return await super().transition_many(items)


async def test_a_worker_that_dies_before_its_group_commits_leaves_the_tasks_to_run_again(
) -> None:
    """A worker killed after its handlers ended but before their group committed MUST
    have written nothing: the tasks stay leased until the leases expire, then another
    worker runs them again (at least once) and completes them."""
    clock = ManualClock()
    inner = MemoryStore(clock=clock)
    app, gate = _gated_app(_HeldCommits(inner))
    gate.set()
    async with app:
        ids = [(await app.submit("job", None, ALICE)).id for _ in range(N)]
        dying = fast_worker(app, concurrency=N, batch_window=1.0, worker_id="doomed")
        serving = asyncio.create_task(dying.run())
        store = app.store
        assert isinstance(store, _HeldCommits)
        await asyncio.wait_for(store.entered.wait(), TIMEOUT)
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        held = [await app.get(i, ALICE) for i in ids]
        assert [(TaskStatus.RUNNING, 0)] * N == [(h.status, h.revision) for h in held]
        clock.advance(30)
        rescuer = App(store=inner)
        rescuer.tasks.update(app.tasks)
        async with rescuer, fast_worker(rescuer, concurrency=N, worker_id="rescuer"):
            done = [await until(rescuer, i, ALICE, lambda s: s.status.terminal) for i in ids]
    assert [(TaskStatus.COMPLETED, 2)] * N == [(d.status, d.deliveries) for d in done]


async def test_runs_waiting_for_a_slow_group_commit_stop_new_claims_past_commit_batch() -> None:
    """A run gives its slot back once its handler is done, but while the group commit is
    slower than the runs, no more than ``commit_batch`` such runs MUST wait for it beyond
    ``concurrency``: past that, claims stop until the commit answers. (Unbounded, a
    MariaDB worker held no-op tasks 7–30 s between claim and completion — past their lease,
    redelivered up to 7 times — with thousands of outcomes queued in memory.)

    Troubleshooting: ``Slots._free`` counts the settled runs past ``commit_batch``.
    """
    store = _HeldCommits(MemoryStore(clock=ManualClock()))
    app = make_app(store=store)
    started: list[str] = []

    @app.task
    async def job(ctx: TaskContext) -> str:
        started.append(ctx.task_id)
        return ctx.task_id

    worker = fast_worker(app, concurrency=2, commit_batch=4, prefetch=0, batch_window=0.001)
    settled: list[Any] = []
    six_settled = asyncio.Event()
    give_back = worker._settle_slot

    def settle(run: Any) -> None:  # the worker's own, counted
        give_back(run)
        settled.append(run)
        if len(settled) == 6:
            six_settled.set()

    worker._settle_slot = settle  # type: ignore[method-assign]
    async with app:
        ids = [(await app.submit("job", None, ALICE)).id for _ in range(20)]
        async with worker:
            await asyncio.wait_for(six_settled.wait(), TIMEOUT)
            assert (0, 6) == (worker._free(), len(started))
            store.open.set()
            done = [await app.wait(i, ALICE, timeout=TIMEOUT) for i in ids]
    assert [TaskStatus.COMPLETED] * 20 == [d.status for d in done]
    assert sorted(ids) == sorted(started)


async def test_without_batch_transitions_terminal_events_are_written_one_by_one() -> None:
    """On a store without ``batch_transitions`` the worker MUST NOT call
    ``transition_many``: each terminal event is its own ``transition``."""
    store = RecordingStore(CapabilityStore(MemoryStore(clock=ManualClock()),
                                           batch_transitions=False))
    app, gate = _gated_app(store)
    gate.set()
    async with app:
        ids = [(await app.submit("job", None, ALICE)).id for _ in range(N)]
        async with fast_worker(app, concurrency=N):
            for i in ids:
                await app.wait(i, ALICE, timeout=TIMEOUT)
    assert [] == store.groups
    assert sorted(ids) == sorted(r.task_id for r in store.records if r.event.kind == "completed")


@pytest.mark.parametrize("options", [{"batch_window": -1}, {"batch_window": 2},
                                     {"commit_batch": 0}, {"commit_batch": 1001},
                                     {"commit_batch": True}])
async def test_bad_group_commit_settings_are_refused(options: dict[str, Any]) -> None:
    """``batch_window`` outside [0, 1] seconds or ``commit_batch`` outside 1..1000 MUST be
    refused with ``InvalidInput``."""
    with pytest.raises(InvalidInput):
        Worker(make_app(), **options)
