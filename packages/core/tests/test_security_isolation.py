"""Tenant isolation: no sequence of calls by an outsider reveals or changes anything of
another tenant (or of a task it is not a member of), through results, error messages or
existence probes — including for a record that is stored corrupt."""

from __future__ import annotations

from typing import Any

import pytest
from tasks_contract_tests.garbage import check_contained, seed
from tasks_contract_tests.isolation import run_isolation_check
from tasks_core import ManualClock, Owner, System, TaskStore
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


async def _memory(**options: Any) -> TaskStore:
    return MemoryStore(**options)


@pytest.mark.parametrize("visibility", ["watchers", "tenant"])
def test_outsiders_learn_and_change_nothing(visibility: Any) -> None:
    """Random sequences of every client call by principals of another tenant (and, under
    ``visibility="watchers"``, by a non-member of the same tenant), aimed at ids guessed
    from a tenant's real ids, MUST leave that tenant's tasks, histories and leases exactly
    as they were, and every answer about an existing task MUST equal the answer about a
    missing id once the id is masked."""
    run_isolation_check(_memory, max_examples=60, visibility=visibility)


async def test_a_corrupt_record_reads_as_missing_to_whoever_cannot_own_it() -> None:
    """A record that fails validation MUST raise ``StoreCorrupt`` (naming only its id) to
    ``System`` and to its owner, and MUST read exactly like a missing task to another
    tenant or a non-member — whether a record exists must not leak through its damage;
    listings, claims and reaping MUST carry on past it."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    seeded = await seed(store, clock)
    store._corrupt(seeded.victim)
    await check_contained(store, clock, seeded)


@pytest.mark.parametrize("forged", [
    Owner("placeholder").model_copy(update={"user_id": "acme::alice"}),
    Owner.model_construct(user_id="", tenant="acme"),
    Owner("placeholder").model_copy(update={"tenant": "a::b"}),
    System.model_construct(tenant=""),
], ids=["user-with-separator", "empty-user", "tenant-with-separator", "empty-system-tenant"])
async def test_a_principal_copied_past_its_checks_is_refused_before_any_read(
    forged: Any,
) -> None:
    """A principal whose names skipped validation (pydantic's ``model_copy(update=…)`` or
    ``model_construct``) MUST be refused with ``InvalidInput`` by every call — as
    authority and as a watcher — before anything is read or written: ``acme::alice`` as a
    user made ids inside tenant acme's key space (squatting alice's keys, probing them)."""
    from tasks_core import App, InvalidInput, TaskContext

    app = App(store=MemoryStore())

    @app.task
    async def job(ctx: TaskContext) -> None:
        return None

    alice = Owner("alice", "acme")
    async with app:
        mine = await app.submit(job, None, alice, key="invoice-7")
        with pytest.raises(InvalidInput):
            await app.submit(job, None, forged, key="invoice-7")
        with pytest.raises(InvalidInput):
            await app.get(mine.id, forged)
        with pytest.raises(InvalidInput):
            await app.cancel(mine.id, forged)
        if isinstance(forged, Owner):
            with pytest.raises(InvalidInput):
                await app.submit(job, None, alice, watchers=[forged])
        assert [mine.id] == [s.id for s in (await app.list(System())).items]
