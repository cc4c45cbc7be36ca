"""The layout of a task in its row (``_stored``): the keys a claim or a completion writes
(``HEAD_KEYS``) and those the row holds anyway (``ROW_KEYS``) as columns, every other key
in the body — ASCII JSON text without the values at their defaults — and the two decode
to the snapshot they came from, whatever the values spell.

The PostgreSQL claim and completion statements rely on it to write columns only.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tasks_contract_tests._kit import BOB, new_task
from tasks_core import (
    Completed,
    InputRequested,
    ManualClock,
    Owner,
    RetryPolicy,
    RetryRequested,
    Snapshot,
    rules,
)
from tasks_core.errors import StoreCorrupt
from tasks_core.events import Cancelled
from tasks_store_sql import _codec
from tasks_store_sql._stored import OUT_OF_BODY, Stored

TRAPS = {"x": 1, "id": "a", "quote": ',"id":"', "accent": "é\u2028", "emoji": "\U0001f600"}
WORKER = 'w,"id":"é'


def _stored(snapshot: Snapshot) -> Stored:
    return _codec.stored_of(_codec.projection(snapshot, None))


def _lives(values: Any) -> list[Snapshot]:
    """A task's snapshots through claims (held, recovered), progress, input, a retry and
    each ending."""
    now = rules.tick(ManualClock().now())
    later = now + timedelta(seconds=1)
    task = rules.new_snapshot(new_task(input=values, retry=RetryPolicy.fixed(1.0, attempts=3),
                                       ttl_s=60), now)
    held, _, _, _ = rules.start_claim(task, WORKER, 30.0, now, held=True)
    claimed, token, lease, _ = rules.start_claim(task, WORKER, 30.0, now)
    assert lease is not None
    progressed = rules.report_progress(claimed, token, lease, 50.0, "é½", now)
    asked = _applied(progressed, InputRequested(event_id="a", key="k", request=values), now)
    retried = _applied(claimed, RetryRequested(event_id="r", error="E", message="é"), now)
    again, _, _, _ = rules.start_claim(retried, WORKER, 30.0, later + timedelta(seconds=2))
    recovered, _, _, _ = rules.start_claim(claimed, WORKER, 30.0, now + timedelta(seconds=31))
    ends = [_applied(claimed, Completed(event_id="c", result=values), later),
            _applied(claimed, Cancelled(event_id="x"), later)]
    return [task, held, claimed, progressed, asked, retried, again, recovered, *ends]


def _applied(snapshot: Snapshot, event: Any, at: datetime) -> Snapshot:
    applied = rules.apply_event(snapshot, event, rules.next_commit_time(snapshot, at))
    assert applied is not None
    return applied[0]


@pytest.mark.parametrize("values", [{"n": 1}, TRAPS, None, [1.5, 2**70]],
                         ids=["ascii", "escaped", "none", "numbers"])
def test_every_state_of_a_task_decodes_from_its_columns_and_body(values: Any) -> None:
    for snapshot in _lives(values):
        stored = _stored(snapshot)
        assert stored.body.isascii()
        body = json.loads(stored.body)
        assert not set(body) & OUT_OF_BODY
        assert _codec.decode_snapshot(snapshot.id, stored) == snapshot


def test_a_claim_and_a_completion_change_columns_only() -> None:
    """The body of a task is what it was at creation through claims, progress and its
    end (a question, an answer or a retry changes keys of the body)."""
    first, *rest = _lives(TRAPS)
    unchanged = [s for s in rest if s.retry_count == 0 and not s.input_history]
    assert len(unchanged) == 6
    assert {_stored(s).body for s in unchanged} == {_stored(first).body}


def test_damaged_columns_or_body_are_corrupt_never_another_snapshot() -> None:
    snapshot = _lives({"n": 1})[2]
    stored = _stored(snapshot)
    for damaged in (stored._replace(body="{not json"), stored._replace(body="{}"),
                    stored._replace(revision="x"), stored._replace(progress="{"),  # type: ignore[arg-type]
                    stored._replace(claim_generation=None), stored._replace(status="nope"),
                    stored._replace(tenant=None), stored._replace(created_at=None),  # type: ignore[arg-type]
                    stored._replace(body='{"id":"other",' + stored.body[1:])):
        with pytest.raises(StoreCorrupt):
            _codec.decode_snapshot(snapshot.id, damaged)


@pytest.mark.parametrize("at", [
    datetime(2030, 1, 1, tzinfo=UTC), datetime(1500, 6, 1, 12, 0, 0, 239000, tzinfo=UTC),
])
def test_instants_decode_back_from_their_columns(at: datetime) -> None:
    snapshot = rules.new_snapshot(new_task(delay_s=90, ttl_s=60), at)

    stored = _stored(snapshot)

    assert (stored.created_at, stored.run_at) == (at, at + timedelta(seconds=90))
    assert _codec.decode_snapshot(snapshot.id, stored) == snapshot


@pytest.mark.parametrize("values", [{"n": 1}, TRAPS], ids=["ascii", "escaped"])
def test_the_body_leaves_out_every_value_at_its_default_and_decodes_the_same(
    values: dict[str, object],
) -> None:
    now = rules.tick(ManualClock().now())
    snapshot = rules.new_snapshot(new_task(input=values), now)

    stored = _stored(snapshot)

    body = json.loads(stored.body)
    assert set(body) == {"work"}
    assert body["work"] == {"name": "job", "input": values}
    assert _codec.decode_snapshot(snapshot.id, stored) == snapshot


def test_the_body_keeps_every_value_that_is_not_its_default() -> None:
    now = rules.tick(ManualClock().now())
    snapshot = rules.new_snapshot(new_task(
        queue="q", watchers=(BOB,), max_deliveries=3, timeout_s=5.0, ttl_s=60.0,
        retention_s=0.0, delay_s=1.0, priority=-7, retry=RetryPolicy.exponential(1.0, attempts=2),
    ), now)

    stored = _stored(snapshot)

    body = json.loads(stored.body)
    assert {"priority": -7, "ttl_s": 60.0, "retention_s": 0.0}.items() <= body.items()
    assert "watchers" in body
    assert not {"queue", "run_at"} & set(body)  # columns
    assert (stored.queue, stored.run_at) == (snapshot.queue, snapshot.run_at)
    work = body["work"]
    assert isinstance(work, dict)
    assert {"max_deliveries": 3, "timeout_s": 5.0}.items() <= work.items()
    assert "retry_policy" in work
    assert _codec.decode_snapshot(snapshot.id, stored) == snapshot


def test_an_owner_of_another_tenant_stays_in_the_body() -> None:
    """No ``NewTask`` allows it, but a snapshot can hold one: the body keeps what the
    owner column cannot give back, and the body's keys win."""
    now = rules.tick(ManualClock().now())
    snapshot = rules.new_snapshot(new_task(), now).model_copy(
        update={"owner": Owner("x", tenant="other")})

    stored = _stored(snapshot)

    assert json.loads(stored.body)["owner"] == {"user_id": "x", "tenant": "other"}
    assert _codec.decode_snapshot(snapshot.id, stored) == snapshot
