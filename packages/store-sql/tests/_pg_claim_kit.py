"""Helpers of the PostgreSQL claim tests: a task's stored text, the claim the rules decide."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from tasks_contract_tests._kit import LEASE_S
from tasks_core import Completed, ManualClock, Snapshot, TaskStatus, rules
from tasks_store_sql import SQLStore, _codec

WORKER = "w-claims"


async def stored_text(store: SQLStore, task_id: str) -> str:
    """The snapshot column of ``task_id``'s row, as stored."""
    t = store.tables.tasks
    async with store._db.engine.connect() as conn:
        text = (await conn.execute(sa.select(t.c.snapshot).where(t.c.id == task_id))).scalar()
    assert isinstance(text, str)
    return text


async def stored_snapshot(store: SQLStore, task_id: str) -> Snapshot:
    """The stored snapshot as ``rules`` sees it (decoded from the row, not presented)."""
    return Snapshot.model_validate_json(await stored_text(store, task_id))


def head_and_rest(text: str) -> tuple[list[str], str]:
    """The keys of the head of stored ``text``, in order, and the rest of it (from
    ``,"id":"``)."""
    cut = text.index(',"id":"')
    return list(json.loads(text[:cut] + "}")), text[cut:]


async def claim_matches_the_rules(store: SQLStore, clock: ManualClock, task_id: str) -> None:
    """Claim ``task_id`` (``limit=1``) and check the claim is what ``rules.start_claim``
    decides from the snapshot before it: returned, stored, laid out and leased; then end it
    under the returned lease."""
    before = await stored_snapshot(store, task_id)
    now = rules.tick(clock.now())
    expected, _, lease, failure = rules.start_claim(before, WORKER, LEASE_S, now)
    assert failure is None
    assert lease is not None

    got = await store.claim_next(WORKER, LEASE_S, queues=["default"], limit=1)

    assert [c.snapshot.id for c in got] == [task_id]
    claim = got[0]
    assert claim.snapshot == rules.present(expected, now)
    assert await stored_snapshot(store, task_id) == expected
    # laid out as the codec lays it out: the head first, the rest spelled as the codec does
    assert head_and_rest(await stored_text(store, task_id)) == head_and_rest(
        _codec.encode_snapshot(expected))
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
    """Set columns of ``task_id``'s row to ``values`` behind the store's back (a row as
    another version would have written it)."""
    t = store.tables.tasks
    async with store._db.engine.begin() as conn:
        await conn.execute(sa.update(t).where(t.c.id == task_id).values(**values))
