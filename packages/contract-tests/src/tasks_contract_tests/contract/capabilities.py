"""Capability flags: frozen, truthful and enforced; exclusive queues and wakeups.

Skips are keyed on ``store.capabilities`` only, never on a store's name or type.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest
from tasks_core import (
    Cancelled,
    CapabilityNotSupported,
    Claim,
    Completed,
    Failed,
    InvalidInput,
    ManualClock,
    StoreCapabilities,
    TaskNotFound,
    TaskStore,
)
from tasks_core.storekit import QueueLimits

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    ALICE,
    LEASE_S,
    access,
    claim,
    created_and_claimed,
    new_task,
)

Probe = Callable[[TaskStore], Awaitable[object]]
WAKE_TIMEOUT = 10.0
POKES = 50


async def _probe_exclusive(store: TaskStore) -> object:
    return await store.claim_next("w1", LEASE_S, queues=["default"], exclusive=["default"])


async def _probe_queue_limits(store: TaskStore) -> object:
    return await store.claim_next("w1", LEASE_S, queues=["default"],
                                  limits={"default": QueueLimits(max_running=1)})


async def _probe_wakeups(store: TaskStore) -> object:
    return await store.wait_for_work(["default"], 0.01)


async def _probe_cancel_wakeups(store: TaskStore) -> object:
    return await store.wait_for_cancels(set(), 0.01)


async def _probe_batches(store: TaskStore) -> object:
    return await store.transition_many([])


async def _probe_batch_create(store: TaskStore) -> object:
    return await store.create_many([])


async def _probe_counts(store: TaskStore) -> object:
    return await store.counts(tenant=None)


async def _probe_transactions(store: TaskStore) -> object:
    return await store.create(new_task("in-a-transaction"), transaction=object())


PROBES: dict[str, Probe] = {
    "exclusive_queues": _probe_exclusive,
    "queue_limits": _probe_queue_limits,
    "wakeups": _probe_wakeups,
    "cancel_wakeups": _probe_cancel_wakeups,
    "batch_transitions": _probe_batches,
    "batch_create": _probe_batch_create,
    "counts": _probe_counts,
    "transactional_submit": _probe_transactions,
}
"""The feature each optional flag stands for."""
REFUSAL_ONLY = frozenset({"transactional_submit"})
"""Flags probed only when off: the feature needs a handle of the store's own kind (an
``AsyncConnection`` on SQL), so a store that offers it proves it in its own tests."""
NO_FEATURE = frozenset({"durable", "multi_process"})
"""Flags that describe the store but gate no operation that could refuse."""


def _ids(claims: list[Claim]) -> list[str]:
    return [c.snapshot.id for c in claims]


async def _serial(store: TaskStore, clock: ManualClock, count: int) -> list[str]:
    """``count`` tasks on queue ``serial``, oldest first."""
    ids = []
    for _ in range(count):
        ids.append((await store.create(new_task(queue="serial"))).id)
        clock.advance(0.001)
    return ids


async def _next_serial(store: TaskStore, worker: str = "w1", limit: int = 5) -> list[str]:
    got = await store.claim_next(worker, LEASE_S, queues=["serial"], limit=limit,
                                 exclusive=["serial"])
    return _ids(got)


def _require(store: TaskStore, flag: str) -> None:
    if not getattr(store.capabilities, flag):
        pytest.skip(f"store capability {flag!r} is off")


async def _woken_by(
    store: TaskStore, queue: str, poke: Callable[[], Awaitable[object]]
) -> list[bool]:
    """Wait on ``queue`` while another coroutine pokes until the waiter returns.

    The poker yields to the waiter before each poke and stops as soon as it has returned,
    so no sleep stands in for "the waiter is listening".
    """
    result: list[bool] = []

    async def waiter() -> None:
        result.append(await store.wait_for_work([queue], WAKE_TIMEOUT))

    async with anyio.create_task_group() as group:
        group.start_soon(waiter)
        for _ in range(POKES):
            await anyio.lowlevel.checkpoint()
            if result:
                break
            await poke()
    return result


class CapabilityContract(ContractBase):
    """Capability flags: frozen, truthful and enforced; exclusive queues and wakeups."""

    # -- the flags ------------------------------------------------------------------------------

    async def test_capabilities_are_frozen_and_constant(self, store: TaskStore) -> None:
        """``store.capabilities`` MUST be a frozen ``StoreCapabilities`` that reads the same
        before and after the store is used.

        Troubleshooting: declare the capabilities once, in code (a class constant or a
        value fixed when the store opens), and return a ``StoreCapabilities``.
        """
        before = store.capabilities
        assert isinstance(before, StoreCapabilities)
        with pytest.raises((TypeError, ValueError)):
            before.durable = not before.durable  # type: ignore[misc]
        created = await store.create(new_task())
        await claim(store, created.id)
        assert before == store.capabilities

    async def test_off_capabilities_raise_capability_not_supported(
        self, store: TaskStore
    ) -> None:
        """Every capability flag that is off MUST make its feature raise
        ``CapabilityNotSupported`` (``exclusive_queues``: ``claim_next(exclusive=…)``;
        ``queue_limits``: ``claim_next(limits=…)``; ``wakeups``: ``wait_for_work``;
        ``batch_transitions``: ``transition_many``; ``batch_create``: ``create_many``;
        ``counts``: ``counts``; ``transactional_submit``:
        ``create(…, transaction=…)``, storing nothing), and a flag that is on MUST NOT.

        Troubleshooting: check the flag at the top of the optional operation. A flag that
        says "on" while the feature refuses (or "off" while it silently does something
        else) misleads the runtime, which picks its strategy from these flags.
        """
        flags = store.capabilities.model_dump()
        assert set() == set(flags) - set(PROBES) - NO_FEATURE, "the suite lacks a probe"
        for flag, probe in PROBES.items():
            if flags[flag]:
                if flag not in REFUSAL_ONLY:
                    await probe(store)
            else:
                with pytest.raises(CapabilityNotSupported):
                    await probe(store)
        with pytest.raises(TaskNotFound):
            await store.get("in-a-transaction", tenant=None)

    # -- exclusive queues -----------------------------------------------------------------------

    async def test_exclusive_queue_yields_nothing_while_a_task_of_it_is_leased(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim_next(exclusive=[q])`` MUST return nothing from ``q`` while any task of
        ``q`` holds a live lease — whoever claimed it, however.

        Troubleshooting: check for a live lease on the queue in the same atomic step as
        the claim (a lock per queue, or a conditional insert into a "queue busy" row);
        checking first and claiming after lets two workers run the queue at once.
        """
        _require(store, "exclusive_queues")
        first, _ = await _serial(store, clock, 2)
        await claim(store, first)
        assert [] == await _next_serial(store, "w2")
        assert [] == await _next_serial(store, "w3")

    async def test_exclusive_queue_yields_at_most_one_task_per_call(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``claim_next(exclusive=[q], limit=n)`` MUST claim at most one task of ``q`` —
        the oldest — however large ``n`` is.

        Troubleshooting: once a task of an exclusive queue is claimed in a batch, the queue
        is busy for the rest of the batch.
        """
        _require(store, "exclusive_queues")
        ids = await _serial(store, clock, 3)
        assert ids[:1] == await _next_serial(store, limit=5)

    async def test_exclusive_queue_does_not_hold_back_other_queues(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A busy exclusive queue MUST NOT stop ``claim_next`` from serving the other
        queues of the same call.

        Troubleshooting: apply the exclusivity per queue, not to the whole call.
        """
        _require(store, "exclusive_queues")
        serial = await _serial(store, clock, 2)
        bulk = [(await store.create(new_task(queue="bulk"))).id for _ in range(3)]
        got = await store.claim_next(
            "w1", LEASE_S, queues=["serial", "bulk"], limit=10, exclusive=["serial"]
        )
        assert sorted([serial[0], *bulk]) == sorted(_ids(got))

    @pytest.mark.parametrize("end", ["completed", "failed", "released"])
    async def test_exclusive_queue_frees_up_when_the_lease_ends(
        self, store: TaskStore, clock: ManualClock, end: str
    ) -> None:
        """When the running task of an exclusive queue completes, fails or is released,
        the next ``claim_next(exclusive=[q])`` MUST serve the queue again — at once, without
        the clock moving.

        Troubleshooting: terminal events from the lease holder and ``release`` end the
        lease at their commit instant; the busy check must treat an ended lease as free even
        if the commit instant lies a millisecond ahead of the store clock.
        """
        _require(store, "exclusive_queues")
        ids = await _serial(store, clock, 3)
        [held] = await store.claim_next(
            "w1", LEASE_S, queues=["serial"], exclusive=["serial"]
        )
        if end == "completed":
            await store.transition(held.snapshot.id, 0, Completed(event_id="d"), held.lease)
        elif end == "failed":
            await store.transition(held.snapshot.id, 0, Failed(event_id="f", error="E"),
                                   held.lease)
        else:
            await store.release(held.lease)
        expected = ids[0] if end == "released" else ids[1]
        assert [expected] == await _next_serial(store, "w2")

    async def test_exclusive_queue_frees_up_when_the_lease_expires(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """When the lease on an exclusive queue's task expires, ``claim_next(exclusive=[q])``
        MUST serve the queue again (the expired task first: it is the oldest).

        Troubleshooting: the busy check counts live leases only, by the store clock.
        """
        _require(store, "exclusive_queues")
        ids = await _serial(store, clock, 2)
        assert ids[:1] == await _next_serial(store)
        clock.advance(LEASE_S)
        assert ids[:1] == await _next_serial(store, "w2")

    # -- wakeups ------------------------------------------------------------------------------

    async def test_wait_for_work_wakes_when_a_task_is_created_on_a_watched_queue(
        self, store: TaskStore
    ) -> None:
        """``wait_for_work([q], timeout)`` MUST return ``True`` before the timeout when
        another coroutine creates a task on ``q``.

        Troubleshooting: notify waiters in (or right after) the commit of ``create``
        (PostgreSQL ``NOTIFY``, a change stream, an in-process condition). The notification
        must reach waiters on any event loop or thread.
        """
        _require(store, "wakeups")

        async def create() -> object:
            return await store.create(new_task(queue="mail"))

        assert [True] == await _woken_by(store, "mail", create)

    async def test_wait_for_work_wakes_when_a_task_is_released(self, store: TaskStore) -> None:
        """``wait_for_work([q], timeout)`` MUST return ``True`` before the timeout when a
        task of ``q`` is released.

        Troubleshooting: ``release`` makes work claimable, so it must notify like
        ``create`` does.
        """
        _require(store, "wakeups")
        for _ in range(POKES):
            await store.create(new_task(queue="mail"))

        async def claim_and_release() -> object:
            [held] = await store.claim_next("w1", LEASE_S, queues=["mail"])
            return await store.release(held.lease)

        assert [True] == await _woken_by(store, "mail", claim_and_release)

    async def test_wait_for_work_returns_false_on_timeout(self, store: TaskStore) -> None:
        """``wait_for_work`` with nothing happening MUST return ``False`` once the timeout
        passes, promptly.

        Troubleshooting: bound the wait with the timeout and report it as ``False``, not as
        an exception.
        """
        _require(store, "wakeups")
        started = time.monotonic()
        assert False is await store.wait_for_work(["quiet"], 0.05)
        assert time.monotonic() - started < WAKE_TIMEOUT / 2

    # -- cancel wakeups -----------------------------------------------------------------------

    async def test_wait_for_cancels_reports_a_cancel_while_waiting(
        self, store: TaskStore
    ) -> None:
        """``wait_for_cancels(ids, timeout)`` MUST return the id of a watched task that
        another coroutine cancels while it waits, before the timeout.

        Troubleshooting: send the notification in (or right after) the commit of the
        transition that cancels (PostgreSQL ``NOTIFY``, a change stream, an in-process
        condition), and have the waiter listen on it.
        """
        _require(store, "cancel_wakeups")
        task = await _claimed(store)
        await store.wait_for_cancels(set(), 0)  # the store listens from now on
        result: list[set[str]] = []

        async def waiter() -> None:
            result.append(await store.wait_for_cancels({task}, WAKE_TIMEOUT))

        started = time.monotonic()
        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            await anyio.lowlevel.checkpoint()
            await _cancel(store, task)
        assert [{task}] == result
        assert time.monotonic() - started < WAKE_TIMEOUT / 2

    async def test_wait_for_cancels_reports_a_cancel_made_between_waits(
        self, store: TaskStore
    ) -> None:
        """A cancel committed after the store's first ``wait_for_cancels`` but before the
        next call began MUST be reported by that call, at once (a worker claims a task,
        and its cancel may land before its watcher waits again).

        Troubleshooting: keep the cancels that no waiter watched (a bounded set), or read
        the watched tasks' status when a wait begins.
        """
        _require(store, "cancel_wakeups")
        task = await _claimed(store)
        await store.wait_for_cancels(set(), 0)
        await _cancel(store, task)
        started = time.monotonic()
        assert {task} == await store.wait_for_cancels({task}, WAKE_TIMEOUT)
        assert time.monotonic() - started < WAKE_TIMEOUT / 2

    async def test_wait_for_cancels_reads_ids_added_while_waiting(
        self, store: TaskStore
    ) -> None:
        """``task_ids`` is a live collection: an id added while the call waits MUST be
        reported when that task is cancelled afterwards.

        Troubleshooting: test membership in the caller's collection when a cancel arrives;
        do not copy it when the wait begins.
        """
        _require(store, "cancel_wakeups")
        task = await _claimed(store)
        await store.wait_for_cancels(set(), 0)
        watched: set[str] = set()
        result: list[set[str]] = []

        async def waiter() -> None:
            result.append(await store.wait_for_cancels(watched, WAKE_TIMEOUT))

        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            await anyio.lowlevel.checkpoint()
            watched.add(task)
            await _cancel(store, task)
        assert [{task}] == result

    async def test_wait_for_cancels_reports_only_cancels_of_watched_tasks(
        self, store: TaskStore
    ) -> None:
        """A cancel of an unwatched task and the completion of a watched one MUST NOT be
        reported: the call returns an empty set once the timeout passes.

        Troubleshooting: notify only transitions that end in ``cancelled``, and report
        only ids the caller watches.
        """
        _require(store, "cancel_wakeups")
        watched, lease = await created_and_claimed(store)
        other = await _claimed(store)
        await store.wait_for_cancels(set(), 0)
        await _cancel(store, other)
        done = await store.transition(watched.id, watched.revision,
                                      Completed(event_id="done"), lease)
        assert "applied" == done.outcome, done
        assert set() == await store.wait_for_cancels({watched.id}, 0.2)

    @pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, True, "5"])
    async def test_wait_for_cancels_refuses_a_bad_timeout(
        self, store: TaskStore, timeout: object
    ) -> None:
        """A timeout that is not a finite real number of seconds >= 0 MUST raise
        ``InvalidInput`` (a NaN or infinite timer never fires).

        Troubleshooting: check the timeout before waiting, bools and strings included.
        """
        _require(store, "cancel_wakeups")
        with pytest.raises(InvalidInput):
            await store.wait_for_cancels(set(), timeout)  # type: ignore[arg-type]


async def _claimed(store: TaskStore) -> str:
    """A task of ``ALICE``'s, claimed by ``w1``: its id."""
    created = await store.create(new_task())
    await claim(store, created.id)
    return created.id


async def _cancel(store: TaskStore, task_id: str) -> None:
    current = await store.get(task_id, tenant=None)
    done = await store.transition(task_id, current.revision, Cancelled(event_id="cancel"),
                                  access(ALICE))
    assert "applied" == done.outcome, done
