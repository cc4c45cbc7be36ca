"""``max_active_tasks_per_scope`` on a standalone server (no transactions): exact under
concurrent creates from separate clients in separate threads, and every unit of the
tenant's counter given back when its task stops counting (``_scopes``).

The race is proven by a broken store that checks the counter before it increments it:
the same race check MUST fail against it.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mongo_server import secantusd, store_url
from tasks_contract_tests._kit import ALICE, access, new_task
from tasks_core import Cancelled, CapacityExceeded, InvalidInput, ManualClock, TaskQuery
from tasks_store_mongo import MongoStore, _scopes
from tasks_store_mongo.plugin import open_mongo
from thread_race import race_in_threads

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        shutil.which(secantusd()) is None and not Path(secantusd()).exists(),
        reason="secantusd-py is not installed",
    ),
]

CAP = 3
THREADS = 6
PER_THREAD = 2
ROUNDS = 4


class CheckThenIncrement(MongoStore):
    """Broken: reads the tenant's counter, then increments it unconditionally (the check
    and the act are two writes apart), so racing creates can all pass the check."""

    async def _reserve_active(self, tenant: str, now: Any) -> None:
        if tenant not in self._tenants:
            await _scopes.ensure(self._counters, self._tasks, tenant, now)
            self._tenants.add(tenant)
        counter = await self._counters.find_one({"_id": f"active:{tenant}"})
        if counter["n"] >= CAP:
            raise CapacityExceeded("max_active_tasks_per_scope")
        await self._counters.update_one({"_id": f"active:{tenant}"}, {"$inc": {"n": 1}})


async def _race_rounds(cls: type[MongoStore], base: str, driver: str) -> list[tuple[int, int]]:
    """``ROUNDS`` races of ``THREADS`` threads in a fresh tenant each; per round, the
    number of creates that returned and the tenant's active tasks stored after it.

    Raises:
        AssertionError: a create ended with anything but a task or ``CapacityExceeded``.
    """
    namespace = "s" + secrets.token_hex(5)
    rounds = []
    for n in range(ROUNDS):
        tenant = f"t{n}"
        outcomes: list[Any] = []

        async def create(racer: MongoStore, tenant: str = tenant,
                         outcomes: list[Any] = outcomes) -> None:
            for _ in range(PER_THREAD):
                try:
                    outcomes.append(await racer.create(new_task(owner=None, tenant=tenant)))
                except CapacityExceeded as exc:
                    outcomes.append(exc)

        race_in_threads(THREADS, cls, base, driver, namespace, create,
                        max_active_tasks_per_scope=CAP)
        assert THREADS * PER_THREAD == len(outcomes)  # every thread ran to its end
        assert all(isinstance(o, CapacityExceeded) for o in outcomes if isinstance(o, Exception))
        reader = await open_mongo(store_url(base, driver), namespace=namespace)
        try:
            stored = await reader.list(TaskQuery(tenant=tenant, limit=100))
        finally:
            await reader.aclose()
        created = [o for o in outcomes if not isinstance(o, Exception)]
        assert sorted(s.id for s in created) == sorted(s.id for s in stored)
        rounds.append((len(created), len(stored)))
    return rounds


def _exact(rounds: list[tuple[int, int]]) -> None:
    """Every round MUST have stored exactly ``CAP`` tasks: no more (the limit), no fewer
    (a refusal only when full)."""
    assert [(CAP, CAP)] * ROUNDS == rounds


async def test_racing_creates_in_threads_store_exactly_the_limit(
    standalone: str, driver: str
) -> None:
    """Creates in one tenant racing from separate threads, each with its own client and
    store on a standalone server, MUST store exactly ``max_active_tasks_per_scope`` tasks
    and refuse the rest with ``CapacityExceeded``, round after round."""
    _exact(await _race_rounds(MongoStore, standalone, driver))


async def test_the_race_catches_a_store_that_checks_before_it_acts(
    standalone: str, driver: str
) -> None:
    """The race above MUST fail against a store that reads the counter and then
    increments it: racing creates all pass the read."""
    rounds = await _race_rounds(CheckThenIncrement, standalone, driver)
    with pytest.raises(AssertionError):
        _exact(rounds)


@pytest.fixture
async def limited(standalone: str, driver: str) -> AsyncIterator[tuple[Any, ManualClock]]:
    """A store with ``max_active_tasks_per_scope=2`` on the standalone server."""
    clock = ManualClock()
    store = await open_mongo(store_url(standalone, driver), clock=clock,
                             namespace="s" + secrets.token_hex(5),
                             max_active_tasks_per_scope=2)
    try:
        yield store, clock
    finally:
        await store.aclose()


async def _units(store: Any, tenant: str = "acme") -> int:
    counter = await store._counters.find_one({"_id": f"active:{tenant}"})
    return int(counter["n"])


async def test_a_finished_task_gives_its_unit_back(limited: tuple[Any, ManualClock]) -> None:
    """A full tenant MUST refuse a create until one of its tasks finishes, then take it;
    the counter MUST then hold one unit per active task."""
    store, _ = limited
    first = await store.create(new_task())
    await store.create(new_task())
    with pytest.raises(CapacityExceeded):
        await store.create(new_task())
    await store.transition(first.id, 0, Cancelled(event_id="c"), access(ALICE))
    await store.create(new_task())
    assert 2 == await _units(store, ALICE.tenant)
    with pytest.raises(CapacityExceeded):
        await store.create(new_task())


async def test_an_expired_task_gives_its_unit_back(limited: tuple[Any, ManualClock]) -> None:
    """A task past its TTL no longer counts: a full tenant MUST take a create once it
    expired, and not before."""
    store, clock = limited
    await store.create(new_task(ttl_s=60))
    await store.create(new_task())
    with pytest.raises(CapacityExceeded):
        await store.create(new_task())
    clock.advance(61)
    await store.create(new_task())
    assert 2 == await _units(store, ALICE.tenant)


async def test_a_create_that_fails_after_its_unit_gives_it_back(
    limited: tuple[Any, ManualClock],
) -> None:
    """A create refused by the server after the unit was taken (a document over 16 MiB)
    MUST leave the counter as it was."""
    store, _ = limited
    await store.create(new_task())
    with pytest.raises(InvalidInput):
        await store.create(new_task(input="x" * (17 * 1024 * 1024)))
    assert 1 == await _units(store, ALICE.tenant)
    await store.create(new_task())


async def test_delete_reap_and_replace_keep_the_counter(
    limited: tuple[Any, ManualClock],
) -> None:
    """Deleting, reaping or replacing a counted task MUST give its unit back (a replace
    takes one for the new run): the counter ends at the active tasks' number."""
    store, clock = limited
    one = await store.create(new_task(retention_s=3600))
    two = await store.create(new_task(retention_s=10))
    one_done = await store.transition(one.id, 0, Cancelled(event_id="c"), access(ALICE))
    two_done = await store.transition(two.id, 0, Cancelled(event_id="c"), access(ALICE))
    assert 2 == await _units(store, ALICE.tenant)  # finished, not released yet
    await store.delete(one.id, expected_revision=one_done.snapshot.revision)
    assert 1 == await _units(store, ALICE.tenant)
    await store.create(new_task(one.id), replace=None)
    assert 2 == await _units(store, ALICE.tenant)
    clock.advance(11)
    assert [two.id] == await store.reap()
    assert 1 == await _units(store, ALICE.tenant)
    again = await store.create(new_task(two.id))
    done = await store.transition(again.id, 0, Cancelled(event_id="c"), access(ALICE))
    await store.create(new_task(two.id), replace=done.snapshot)
    assert 2 == await _units(store, ALICE.tenant)
    assert two_done.snapshot.run_id != (await store.get(two.id, tenant=None)).run_id


async def test_the_first_limited_create_counts_the_tasks_from_before(
    standalone: str, driver: str
) -> None:
    """Tasks created while the limit was off MUST count once it is on: the tenant's first
    limited create counts them."""
    namespace = "s" + secrets.token_hex(5)
    url = store_url(standalone, driver)
    unlimited = await open_mongo(url, namespace=namespace)
    limited = await open_mongo(url, namespace=namespace, max_active_tasks_per_scope=3)
    try:
        await unlimited.create(new_task())
        await unlimited.create(new_task())
        await limited.create(new_task())
        with pytest.raises(CapacityExceeded):
            await limited.create(new_task())
        assert 3 == await _units(limited, ALICE.tenant)
    finally:
        await limited.aclose()
        await unlimited.aclose()
