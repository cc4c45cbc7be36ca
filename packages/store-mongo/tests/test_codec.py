"""The document model: payloads read back exactly, the lease token never leaves the store,
instants are BSON dates."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest
from tasks_contract_tests._kit import ALICE, LEASE_S, access, new_task
from tasks_core import (
    Completed,
    Failed,
    InputRequested,
    InputResponsesAccepted,
    InvalidInput,
    ManualClock,
)

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[Any]]

# JSON that BSON cannot carry as such: 65+ bit integers, "$"/"." keys, NUL in keys.
# (Lone surrogates never get this far: core refuses text that is not valid Unicode.)
AWKWARD: Any = {
    "big": 2**80,
    "negative": -(2**70),
    "$where": "not an operator here",
    "a.b": {"c.d": [1, 2.5, None, True, "x"]},
    "nul\u0000key": "",
    "float": 0.1,
    "nested": [[{"$in": []}]],
}


async def test_awkward_payloads_read_back_exactly(open_store: Opener) -> None:
    """Input, questions, answers and results MUST read back exactly as written, whatever
    JSON they hold (they are stored as JSON text, not as BSON)."""
    store = await open_store(clock=ManualClock())
    task = await store.create(new_task(input=AWKWARD))
    assert AWKWARD == task.work.input
    _, lease = await store.claim(task.id, "w1", LEASE_S)
    await store.transition(
        task.id, 0, InputRequested(event_id="q", key="k", request=AWKWARD), lease
    )
    await store.transition(
        task.id, 1, InputResponsesAccepted(event_id="a", responses={"k": AWKWARD}),
        access(ALICE),
    )
    done = await store.transition(task.id, 2, Completed(event_id="r", result=AWKWARD), lease)
    again = await store.get(task.id, tenant=None)
    assert done.snapshot == again
    assert (AWKWARD, AWKWARD) == (again.result, again.accepted_input_responses["k"])
    history = await store.history(task.id, tenant=None)
    assert [AWKWARD, {"k": AWKWARD}, AWKWARD] == [
        history[0].event.request,
        history[1].event.responses,
        history[2].event.result,
    ]


async def test_lease_token_is_stored_beside_the_snapshot_only(open_store: Opener) -> None:
    """The lease token MUST be kept in ``_token`` and appear nowhere in what the store
    returns."""
    store = await open_store(clock=ManualClock())
    task = await store.create(new_task())
    claimed, lease = await store.claim(task.id, "w1", LEASE_S)
    raw = await store._tasks.find_one({"_id": task.id})
    assert lease.token == raw["_token"]
    assert lease.token not in claimed.model_dump_json()
    assert lease.token not in (await store.get(task.id, tenant=None)).model_dump_json()


async def test_instants_are_bson_dates_and_queried_fields_are_native(
    open_store: Opener,
) -> None:
    """Instants MUST be stored as BSON dates (exact to the millisecond) and the fields the
    store queries on (tenant, queue, status, owner) as plain BSON values."""
    clock = ManualClock()
    store = await open_store(clock=clock)
    clock.advance(0.123)
    task = await store.create(new_task(queue="mail", ttl_s=60))
    raw = await store._tasks.find_one({"_id": task.id})
    assert all(isinstance(raw[k], datetime) for k in ("created_at", "updated_at", "expires_at"))
    assert task.created_at == raw["created_at"]
    assert ("default", "mail", "pending") == (raw["tenant"], raw["queue"], raw["status"])
    assert {"user_id": "alice", "tenant": "default"} == raw["owner"]
    assert (True, task.created_at, []) == (raw["_ready"], raw["_ready_at"], raw["_history"])
    assert (task.created_at, 0) == (raw["_avail"], raw["_prio"])
    assert "run_at" not in raw  # written only when set
    assert "priority" not in raw  # written only when not 0


async def test_a_delayed_task_stores_run_at_as_a_date_and_is_ready_from_it(
    open_store: Opener,
) -> None:
    """A delayed task's ``run_at`` MUST be a BSON date, and both its available instant
    (``_avail``, the claim order) and the earliest instant a claim may succeed
    (``_ready_at``) MUST be that ``run_at``."""
    store = await open_store(clock=ManualClock())
    task = await store.create(new_task(delay_s=30))
    raw = await store._tasks.find_one({"_id": task.id})
    assert isinstance(raw["run_at"], datetime)
    assert (task.run_at, task.run_at, task.run_at) == (
        raw["run_at"], raw["_avail"], raw["_ready_at"])


@pytest.mark.parametrize("priority", [100, 1, -1, -100])
async def test_a_priority_is_stored_and_its_negation_orders_claims(
    open_store: Opener, priority: int
) -> None:
    """A task's ``priority`` MUST be stored as an int, and ``_prio`` (the claim order's
    first key, ascending) MUST be its negation — kept by every later write."""
    store = await open_store(clock=ManualClock())
    task = await store.create(new_task(priority=priority))
    raw = await store._tasks.find_one({"_id": task.id})
    assert (priority, -priority) == (raw["priority"], raw["_prio"])
    assert isinstance(raw["_prio"], int)
    claimed, lease = await store.claim(task.id, "w1", LEASE_S)
    await store.transition(task.id, claimed.revision, Completed(event_id="done"), lease)
    raw = await store._tasks.find_one({"_id": task.id})
    assert (priority, -priority) == (raw["priority"], raw["_prio"])
    assert priority == (await store.get(task.id, tenant=None)).priority


async def test_text_mongodb_cannot_store_is_refused_before_anything_is_written(
    open_store: Opener,
) -> None:
    """A message with a lone surrogate (which a BSON string cannot hold) MUST raise
    ``InvalidInput`` and change nothing."""
    store = await open_store(clock=ManualClock())
    task = await store.create(new_task())
    _, lease = await store.claim(task.id, "w1", LEASE_S)
    before = await store.get(task.id, tenant=None)
    with pytest.raises(InvalidInput):
        await store.transition(
            task.id, 0, Failed(event_id="f", error="E", message="bad \ud800"), lease
        )
    assert before == await store.get(task.id, tenant=None)
