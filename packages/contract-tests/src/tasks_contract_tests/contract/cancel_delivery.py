"""How a cancel reaches the worker: before a run starts it always wins; a running handler
hears it promptly where the store pushes cancels; a drained handler stops at its await.

The worker and the canceller are separate ``App`` instances on the store under test (as a
web server and a worker process are), so nothing passes between them in-process. They
wait for conditions (polling the store, bounded), never for a fixed time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from functools import partial
from typing import Any

import pytest
from tasks_core import (
    App,
    CancelReason,
    Claim,
    ManualClock,
    RunCancelled,
    StoreCapabilities,
    TaskContext,
    TaskStatus,
    TaskStore,
)
from tasks_core.storekit import QueueLimits

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import ALICE, submitted_in_order
from tasks_contract_tests.contract.worker import FAST, WAIT_S, _claimed, _until


class _LateClaims:
    """The store, with ``claim_next`` stopping at a gate once it has claimed: the test
    decides when the worker gets the claims."""

    def __init__(self, inner: TaskStore) -> None:
        self.inner = inner
        self.claimed = asyncio.Event()
        self.gate = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def capabilities(self) -> StoreCapabilities:
        return self.inner.capabilities

    async def claim_next(self, worker_id: str, lease_for: float, *, queues: Sequence[str],
                         limit: int = 1, exclusive: Collection[str] = (),
                         start: int | None = None,
                         limits: Mapping[str, QueueLimits] | None = None) -> list[Claim]:
        options = {} if limits is None else {"limits": limits}  # an older store has none
        claims = await self.inner.claim_next(worker_id, lease_for, queues=queues,
                                             limit=limit, exclusive=exclusive, start=start,
                                             **options)
        if claims and not self.gate.is_set():
            self.claimed.set()
            await self.gate.wait()
        return claims


class CancelDeliveryContract(ContractBase):
    """A cancel before the start always wins; one from another app reaches a running
    handler before its timeout where the store pushes cancels; a drain ends a loop of
    ``ctx.sleep``."""

    async def test_a_cancel_while_the_claim_is_on_its_way_means_it_never_starts(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A cancel recorded through the worker's own app after the store claimed the
        task but before the claim reached the worker MUST keep the handler from running.

        Troubleshooting: the worker remembers cancels made while its claims are out and
        drops their claims when they come back.
        """
        late = _LateClaims(store)
        app = App(store=late)
        started: list[str] = []

        @app.task(name="noted")
        async def noted(ctx: TaskContext) -> None:
            started.append(ctx.task_id)

        async with app:
            (first,) = await submitted_in_order(app, noted, clock, 1)
            async with app.worker(concurrency=1, prefetch=0, **FAST):
                await asyncio.wait_for(late.claimed.wait(), WAIT_S)
                await app.cancel(first, ALICE)
                late.gate.set()
                (second,) = await submitted_in_order(app, noted, clock, 1)
                await app.wait(second, ALICE, timeout=WAIT_S)
            assert TaskStatus.CANCELLED == (await app.get(first, ALICE)).status
        assert [second] == started

    async def test_a_held_claim_cancelled_by_another_app_never_starts(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A cancel recorded by another app while the worker holds the task's claim ahead
        (``prefetch``) MUST keep its handler from running: pushed to the worker where the
        store has ``cancel_wakeups``, else found by reading the claim again before it
        starts (it was held ``poll_interval`` or longer).

        Troubleshooting: ``wait_for_cancels`` must report cancels of held tasks; without
        the capability, ``worker_snapshot`` must show the cancel to the lease holder.
        """
        app, client = App(store=store), App(store=store)
        started: list[str] = []
        gate = asyncio.Event()

        @app.task(name="gated")
        async def gated(ctx: TaskContext) -> None:
            started.append(ctx.task_id)
            await gate.wait()

        async with app, client:
            first, held = await submitted_in_order(app, gated, clock, 2)
            async with app.worker(concurrency=1, prefetch=4, **FAST):
                await _until(partial(_claimed, app, held), "the second task held")
                await client.cancel(held, ALICE)
                await _held_for(FAST["poll_interval"])
                gate.set()
                (last,) = await submitted_in_order(client, "gated", clock, 1)
                await app.wait(last, ALICE, timeout=WAIT_S)
            assert TaskStatus.CANCELLED == (await app.get(held, ALICE)).status
        assert [first, last] == started

    async def test_a_cancel_from_another_app_stops_a_running_handler_before_its_timeout(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """Where the store has ``cancel_wakeups``, a cancel recorded by another app MUST
        reach a running handler as ``user`` long before the next heartbeat (the lease is
        30 s: a heartbeat every 10 s), so a 5-second timeout never fires first.

        Troubleshooting: report the cancel through ``wait_for_cancels`` (``NOTIFY``, a
        change stream); a cancel seen only by the heartbeat loses to the timeout.
        """
        if not store.capabilities.cancel_wakeups:
            pytest.skip("store capability 'cancel_wakeups' is off")
        app, client = App(store=store), App(store=store)
        running = asyncio.Event()
        reasons: list[CancelReason | None] = []

        @app.task(name="long", timeout=5.0)
        async def long(ctx: TaskContext) -> None:
            running.set()
            try:
                await ctx.sleep(WAIT_S)
            finally:
                reasons.append(ctx.cancel_reason)

        async with app, client:
            (task,) = await submitted_in_order(app, long, clock, 1)
            async with app.worker(concurrency=1, **FAST):
                await asyncio.wait_for(running.wait(), WAIT_S)
                await client.cancel(task, ALICE)
                await _until(lambda: _ended(reasons), "the handler stopped")
            snapshot = await client.get(task, ALICE)
        assert [CancelReason.USER] == reasons
        assert (TaskStatus.CANCELLED, CancelReason.USER) == (snapshot.status,
                                                            snapshot.cancel_reason)

    async def test_a_drain_ends_a_loop_of_ctx_sleep_and_releases_it_with_its_progress(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A handler looping over ``await ctx.sleep(...)`` and ``ctx.progress(...)`` MUST
        stop at its next sleep when the worker drains (``RunCancelled``, reason
        ``shutdown``), and the task MUST be released — pending, its last progress stored,
        no retry consumed — not run to its end.

        Troubleshooting: the store must keep the progress written just before the
        release (``report_progress`` then ``release`` with the same lease).
        """
        app = App(store=store)
        steps: list[int] = []
        reached = asyncio.Event()
        stopped: list[CancelReason] = []

        @app.task(name="loop")
        async def loop(ctx: TaskContext) -> str:
            for step in range(20):
                try:
                    await ctx.sleep(0 if step < 12 else WAIT_S)
                except RunCancelled as exc:
                    stopped.append(exc.reason)
                    raise
                steps.append(step)
                ctx.progress(5 * (step + 1), f"step {step + 1}")
                if step == 11:
                    reached.set()
            return "ran to the end"

        async with app:
            (task,) = await submitted_in_order(app, loop, clock, 1)
            worker = app.worker(concurrency=1, progress_interval=0.01, **FAST)
            async with worker:
                await asyncio.wait_for(reached.wait(), WAIT_S)
                assert await worker.shutdown(drain_timeout=WAIT_S)
            snapshot = await app.get(task, ALICE)
        assert ([CancelReason.SHUTDOWN], list(range(12))) == (stopped, steps)
        assert (TaskStatus.PENDING, 0, None) == (snapshot.status, snapshot.retry_count,
                                                 snapshot.result)
        assert snapshot.progress is not None
        assert (60.0, "step 12") == (snapshot.progress.value, snapshot.progress.message)


async def _ended(reasons: list[CancelReason | None]) -> bool:
    return bool(reasons)


async def _held_for(seconds: float) -> None:
    """Let a held claim reach the age at which the worker reads it again before starting
    it: the rule's own condition, a time on the loop's clock (its claim was asked before
    the test saw it held, so it is older than this wait)."""
    await asyncio.sleep(seconds)
