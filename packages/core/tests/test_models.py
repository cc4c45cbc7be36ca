"""Model rules: retry delays, JSON-safe payloads, capped messages."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from tasks_core import (
    Completed,
    ErrorInfo,
    Failed,
    InputRequested,
    InvalidInput,
    NewTask,
    Owner,
    RetryPolicy,
    RetryRequested,
    Snapshot,
    Work,
    rules,
)
from tasks_core._json import json_size
from tasks_core.models import (
    MAX_MESSAGE_CHARS,
    Lease,
    StoreLimits,
    TaskStatus,
    built,
    detached,
    replaced,
)


def _delays(policy: RetryPolicy, retries: int) -> list[float]:
    return [policy.delay_for(n).total_seconds() for n in range(1, retries + 1)]


def _runs(policy: RetryPolicy) -> int:
    """How many runs the policy allows in all (the first one included)."""
    runs = 1
    while policy.allows_retry(runs - 1):
        runs += 1
    return runs


# -- RetryPolicy -------------------------------------------------------------------------


def test_fixed_policy_waits_the_same_delay_every_time() -> None:
    """``fixed(d)`` MUST wait ``d`` before every retry."""
    assert [1.5, 1.5, 1.5] == _delays(RetryPolicy.fixed(1.5, attempts=4), 3)


def test_exponential_policy_doubles_up_to_the_cap() -> None:
    """``exponential(b, cap=c)`` MUST wait b, 2b, 4b… but never more than c."""
    policy = RetryPolicy.exponential(1.0, attempts=10, cap=5.0)
    assert [1.0, 2.0, 4.0, 5.0, 5.0] == _delays(policy, 5)


def test_exponential_policy_without_cap_keeps_doubling() -> None:
    """Without a cap the delay MUST keep doubling."""
    assert [0.25, 0.5, 1.0, 2.0] == _delays(RetryPolicy.exponential(0.25, attempts=9), 4)


def test_delays_are_whole_milliseconds() -> None:
    """Delays MUST be rounded to whole milliseconds (the store resolution)."""
    assert timedelta(milliseconds=123) == RetryPolicy.fixed(0.1234, attempts=2).delay_for(1)


@pytest.mark.parametrize(
    ("policy", "runs"),
    [
        (RetryPolicy.none(), 1),
        (RetryPolicy.fixed(1.0, attempts=1), 1),
        (RetryPolicy.fixed(1.0, attempts=3), 3),
        (RetryPolicy.exponential(1.0, attempts=5, cap=60), 5),
    ],
)
def test_attempts_count_every_run_the_first_included(policy: RetryPolicy, runs: int) -> None:
    """``attempts=n`` MUST allow n runs in all: the first run plus n-1 retries."""
    assert runs == _runs(policy)


@pytest.mark.parametrize(
    "arguments",
    [
        {"delay": -1.0, "attempts": 2},
        {"delay": 1.0, "attempts": 0},
        {"delay": 1.0, "attempts": 10_001},
    ],
)
def test_policy_arguments_are_validated(arguments: dict[str, Any]) -> None:
    """Negative delays and out-of-range attempts MUST raise InvalidInput."""
    with pytest.raises(InvalidInput):
        RetryPolicy.fixed(**arguments)


def test_retry_event_schedules_the_policy_delay_from_commit_time(
    snapshot: Snapshot, now: datetime
) -> None:
    """``retry_requested`` MUST set ``retry_at = committed_at + delay`` until the policy is
    exhausted, and then fail the task in the same step."""
    work = snapshot.work.model_copy(update={"retry_policy": RetryPolicy.fixed(2.0, attempts=2)})
    task = snapshot.model_copy(update={"work": work})
    applied = rules.apply_event(task, RetryRequested(event_id="r1", error="Boom"), now)
    assert applied is not None
    retried = applied[0]
    assert (1, now + timedelta(seconds=2)) == (retried.retry_count, retried.retry_at)
    later = now + timedelta(seconds=3)
    exhausted = rules.apply_event(retried, RetryRequested(event_id="r2", error="Boom"), later)
    assert exhausted is not None
    assert ("failed", "Boom", None) == (
        exhausted[0].status,
        exhausted[0].error and exhausted[0].error.type,
        exhausted[0].retry_at,
    )


# -- JSON safety -------------------------------------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


REFUSED: dict[str, Any] = {
    "nan": float("nan"),
    "infinity": float("inf"),
    "negative infinity": [float("-inf")],
    "int key": {1: "a"},
    "tuple": ("a", "b"),
    "set": {"a"},
    "bytes": b"a",
    "datetime": datetime(2030, 1, 1),
    "nested tuple": {"a": [1, (2,)]},
    "65 levels": _nested(65),
}


@pytest.mark.parametrize("value", REFUSED.values(), ids=REFUSED.keys())
def test_payloads_that_are_not_plain_json_are_refused(value: Any) -> None:
    """Only dicts with str keys, lists, str, int, finite float, bool and None at most 64
    levels deep MUST be accepted; anything else raises InvalidInput."""
    with pytest.raises(InvalidInput, match="input"):
        Work(name="job", input=value)


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -1.5, "text", [1, "a", None], {"a": {"b": [1.0, False]}}, _nested(64)],
)
def test_plain_json_payloads_are_kept_exactly(value: Any) -> None:
    """A plain JSON payload MUST read back exactly as given."""
    assert value == Work(name="job", input=value).input


@pytest.mark.parametrize(
    "value", [None, True, 0, -1.5, "tëxt", [1, "a", None], {"a": {"b": [1.0, False]}}],
)
def test_json_size_counts_the_compact_utf8_bytes(value: Any) -> None:
    """``json_size`` (what ``max_result_bytes`` bounds) MUST be the byte length of the
    compact UTF-8 JSON text, ``null`` included."""
    expected = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    assert json_size(value) == expected


def test_results_and_input_requests_are_checked_too() -> None:
    """Every payload the model carries MUST be JSON-checked, not only ``Work.input``."""
    with pytest.raises(InvalidInput):
        Completed(event_id="e", result={"when": datetime(2030, 1, 1)})
    with pytest.raises(InvalidInput):
        InputRequested(event_id="e", key="k", request=float("nan"))


# -- message capping ---------------------------------------------------------------------


def test_stored_messages_are_capped_at_2048_characters() -> None:
    """Error and event messages MUST be cut to 2048 characters, not refused."""
    long = "x" * 5000
    assert 2048 == MAX_MESSAGE_CHARS
    assert "x" * 2048 == ErrorInfo(type="Boom", message=long).message
    assert "x" * 2048 == Failed(event_id="e", error="Boom", message=long).message
    assert "x" * 2048 == RetryRequested(event_id="e", error="Boom", message=long).message


def test_a_failure_stores_the_capped_message(snapshot: Snapshot, now: datetime) -> None:
    """The terminal snapshot MUST carry the capped message."""
    applied = rules.apply_event(
        snapshot, Failed(event_id="e", error="Boom", message="é" * 3000), now
    )
    assert applied is not None
    assert applied[0].error == ErrorInfo(type="Boom", message="é" * 2048)


def test_short_messages_are_kept() -> None:
    """A message within the cap MUST be stored unchanged."""
    assert "short" == ErrorInfo(type="Boom", message="short").message


# -- replaced and built: the hot path's copies ---------------------------------------------


def test_replaced_is_what_model_copy_makes(snapshot: Snapshot, now: datetime) -> None:
    """``replaced(m, **changes)`` MUST equal ``m.model_copy(update=changes)``: fields,
    fields set, hash (where the model has one), JSON, and the original untouched."""
    claimed, _, lease, _ = rules.start_claim(snapshot, "w1", 30.0, now)
    assert claimed.claim is not None
    assert lease is not None
    changes: dict[str, Any] = {"status": TaskStatus.RUNNING, "revision": 3}
    for model, update in ((claimed, changes), (claimed.claim, {"ended": True}),
                          (lease, {"token": "t2", "expires_at": now})):
        before = model.model_dump_json()
        copied = replaced(model, **update)
        expected = model.model_copy(update=update)
        assert copied == expected
        if model is not claimed:  # (a snapshot holds dicts: it has no hash)
            assert hash(copied) == hash(expected)
        assert copied.__pydantic_fields_set__ == expected.__pydantic_fields_set__
        assert copied.model_dump_json() == expected.model_dump_json()
        assert model != copied
        assert model.model_dump_json() == before


def test_built_equals_the_validated_model(now: datetime) -> None:
    """``built(cls, **fields)`` of valid values MUST equal ``cls(**fields)`` (fields set,
    hash and JSON too)."""
    fields: dict[str, Any] = {"task_id": "t1", "worker_id": "w1", "token": "tok",
                              "generation": 2, "expires_at": now}
    made, validated = built(Lease, **fields), Lease(**fields)
    assert made == validated
    assert hash(made) == hash(validated)
    assert made.__pydantic_fields_set__ == validated.__pydantic_fields_set__
    assert made.model_dump_json() == validated.model_dump_json()


@pytest.mark.parametrize("options", [
    {},
    {"delay_s": 2.5, "ttl_s": 60.0, "retention_s": 0.0, "priority": -3},
    {"run_at": "2099-01-01T00:00:00.123456+02:00", "ttl_s": 1.0},
    {"watchers": (Owner("bob"), Owner("carol")), "queue": "emails", "priority": 100},
])
def test_new_snapshot_equals_the_validated_snapshot(
    snapshot: Snapshot, now: datetime, options: dict[str, Any]
) -> None:
    """``rules.new_snapshot`` (built, not validated) MUST equal the snapshot validated
    from its own fields — fields set aside — with the model's key order in its JSON, and
    dicts of its own."""
    new = NewTask(id="alice::k", tenant="default", owner=Owner("alice"),
                  work=Work(name="job", input={"a": [1]}), **options)
    for replace in (None, replaced(snapshot, lease_generation=7)):
        made = rules.new_snapshot(new, now + timedelta(microseconds=1500), replace=replace)
        validated = Snapshot(**{name: getattr(made, name) for name in Snapshot.model_fields})
        assert made == validated
        assert made.model_dump_json() == validated.model_dump_json()  # (in the same order)
        assert made.lease_generation == (7 if replace else 0)
        other = rules.new_snapshot(new, now)
        assert made.input_requests is not other.input_requests
        assert made.accepted_input_responses is not other.accepted_input_responses


@pytest.mark.parametrize("fields", [
    {"task_id": "t1", "worker_id": "w1", "token": "tok", "generation": 2},
    {"task_id": "t1", "worker_id": "w1", "token": "tok", "generation": 2,
     "expires_at": None, "extra": 1},
])
def test_built_refuses_anything_but_exactly_the_fields(fields: dict[str, Any]) -> None:
    """A missing or an unknown field MUST raise ``TypeError`` (no half-built model)."""
    with pytest.raises(TypeError, match="exactly its fields"):
        built(Lease, **fields)


def _containers(value: object) -> list[object]:
    """Every dict and list reachable from ``value`` through models, dicts, lists and
    tuples (the containers a caller could change in place)."""
    found: list[object] = []
    if isinstance(value, (dict, list)):
        found.append(value)
    if isinstance(value, dict):
        children: list[object] = list(value.values())
    elif isinstance(value, (list, tuple)):
        children = list(value)
    elif hasattr(value, "__pydantic_fields__"):
        children = [getattr(value, name) for name in type(value).__pydantic_fields__]
    else:
        children = []
    for child in children:
        found += _containers(child)
    return found


def test_detached_shares_no_changeable_value_with_the_snapshot(snapshot: Snapshot) -> None:
    """``models.detached`` copies every dict and list a snapshot holds — the input, the
    trace context, the result, the input requests and the accepted answers — so a store
    that keeps it shares nothing a caller can change; a snapshot holding none is returned
    as it is."""
    work = Work(name="job", input={"items": [1, {"n": 2}]},
                trace_context={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
    full = replaced(snapshot, work=work, result={"rows": [[1]]},
                    input_requests={"ask": {"prompt": ["a"]}},
                    accepted_input_responses={"ask": {"answer": [True]}})
    copy = detached(full)
    assert full == copy
    kept = {id(container) for container in _containers(copy)}
    shared = [c for c in _containers(full) if id(c) in kept]
    assert [] == shared
    plain = replaced(snapshot, work=Work(name="job"))
    assert detached(plain) is plain


@pytest.mark.parametrize(("limits", "counted"), [
    ({}, False),
    ({"max_tasks": 1}, True),
    ({"max_active_tasks_per_scope": 1}, True),
    ({"max_tasks": 5, "max_active_tasks_per_scope": 5}, True),
])
def test_store_limits_say_whether_a_store_must_count_its_tasks(
    limits: dict[str, int], counted: bool
) -> None:
    """``StoreLimits.any_set`` MUST be true exactly when either capacity limit is set:
    a store keeps count of its tasks only then (SQL: ``_counting``)."""
    assert counted is StoreLimits(**limits).any_set
