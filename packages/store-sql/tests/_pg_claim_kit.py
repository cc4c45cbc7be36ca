"""Helpers of the PostgreSQL claim tests: a task as its row stores it, the claim the rules
decide."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from _stored_kit import stored_as_projected, stored_row
from tasks_contract_tests._kit import LEASE_S
from tasks_core import Completed, ManualClock, TaskStatus, rules
from tasks_store_sql import SQLStore, _codec

WORKER = "w-claims"


async def claim_matches_the_rules(store: SQLStore, clock: ManualClock, task_id: str) -> None:
    """Claim ``task_id`` (``limit=1``) and check the claim is what ``rules.start_claim``
    decides from the snapshot before it: returned, stored column for column as the codec
    writes it, the body untouched, and leased; then end it under the returned lease."""
    before_row = await stored_row(store, task_id)
    before = _codec.decode_snapshot(task_id, before_row)
    now = rules.tick(clock.now())
    expected, _, lease, failure = rules.start_claim(before, WORKER, LEASE_S, now)
    assert failure is None
    assert lease is not None

    got = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1)

    assert [c.snapshot.id for c in got] == [task_id]
    claim = got[0]
    assert claim.snapshot == rules.present(expected, now)
    after = await stored_row(store, task_id)
    assert _codec.decode_snapshot(task_id, after) == expected
    assert after == stored_as_projected(expected)  # every column as the codec writes it
    assert after.body == before_row.body  # a claim never rewrites the body
    assert claim.lease.model_dump(exclude={"token"}) == lease.model_dump(exclude={"token"})
    # the token the claim returned is the one stored: the holder can end the task
    done = await store.transition(
        task_id, claim.snapshot.revision, Completed(event_id=f"done-{task_id}"), claim.lease
    )
    assert done.snapshot.status == TaskStatus.COMPLETED


def refuse_python_claims(store: SQLStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the claim decided in Python fail the test: the statement must claim alone."""

    async def refused(*args: object) -> object:
        raise AssertionError("the claim statement left a row to the claim in Python")

    monkeypatch.setattr(store, "_claim_locked", refused)


async def rewrite_row(store: SQLStore, task_id: str, **values: Any) -> None:
    """Set columns of ``task_id``'s row to ``values`` behind the store's back."""
    t = store.tables.tasks
    async with store._db.engine.begin() as conn:
        await conn.execute(sa.update(t).where(t.c.id == task_id).values(**values))

