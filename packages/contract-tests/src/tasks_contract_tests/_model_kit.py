"""The model check's pool of values, its strategies, and how results are compared.

Private to :mod:`tasks_contract_tests.state_machine` and
:mod:`tasks_contract_tests._model_pair`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from pydantic import TypeAdapter
from tasks_core import (
    CapacityExceeded,
    Claim,
    Deferred,
    EventRecord,
    Lease,
    NewTask,
    Owner,
    RetryPolicy,
    RevisionConflict,
    Snapshot,
    System,
    TaskExists,
    TaskNotFound,
    TaskQuery,
    TaskStatus,
    Transition,
    Work,
)
from tasks_core.events import Event

# -- the pool ----------------------------------------------------------------------------

TASK_IDS = ("t1", "t2", "t3", "t4")
TENANTS = ("default", "acme")
ALICE = Owner("alice")
BOB = Owner("bob")
CAROL = Owner("carol", tenant="acme")
OWNERS = (ALICE, BOB, CAROL)
QUEUES = ("q1", "q2")
WORKERS = ("w1", "w2")
WORKER_EVENT_IDS = ("e1", "e2", "e3")
REQUEST_EVENT_IDS = ("r1", "r2", "r3")
LIMITS: tuple[dict[str, int], ...] = (
    {},
    {"max_tasks": 2},
    {"max_active_tasks_per_scope": 2},
)

LEASE_BODIES: tuple[dict[str, Any], ...] = (
    {"kind": "input_requested", "key": "k1", "request": "name?"},
    {"kind": "input_requested", "key": "k2"},
    {"kind": "retry_requested", "error": "Boom", "message": "again"},
    {"kind": "retry_requested", "error": "Boom"},
    {"kind": "completed", "result": 42},
    {"kind": "completed"},
    {"kind": "failed", "error": "Fatal", "message": "gave up"},
    {"kind": "failed", "error": "Slow", "reason": "timeout"},
)
REQUEST_BODIES: tuple[dict[str, Any], ...] = (
    {"kind": "input_responses_accepted", "responses": {"k1": "bob"}},
    {"kind": "input_responses_accepted", "responses": {"k1": "eve", "k2": 2}},
    {"kind": "input_responses_accepted", "responses": {"zz": 0}},
    {"kind": "cancelled"},
    {"kind": "watcher_added", "principal": BOB},
    {"kind": "watcher_added", "principal": CAROL},
)
EVENTS: TypeAdapter[Event] = TypeAdapter(Event)


def make_event(pair: tuple[str, dict[str, Any]]) -> Event:
    return EVENTS.validate_python({"event_id": pair[0], **pair[1]})


def some_events(
    preferred: tuple[dict[str, Any], ...], ids: tuple[str, ...]
) -> st.SearchStrategy[Event]:
    """Mostly ``preferred`` kinds, sometimes any kind (the wrong authority included)."""
    bodies = st.one_of(
        st.sampled_from(preferred), st.sampled_from(LEASE_BODIES + REQUEST_BODIES)
    )
    return st.tuples(st.sampled_from(ids), bodies).map(make_event)


def new_task(
    task_id: str,
    owner: Owner | None,
    tenant: str,
    queue: str,
    watcher: Owner | None,
    retry: RetryPolicy,
    max_deliveries: int,
    ttl_s: float | None,
    retention_s: float | None,
) -> NewTask:
    tenant = owner.tenant if owner else tenant
    watchers = (watcher,) if watcher and watcher.tenant == tenant and watcher != owner else ()
    return NewTask(
        id=task_id,
        tenant=tenant,
        owner=owner,
        watchers=watchers,
        queue=queue,
        work=Work(name="job", retry_policy=retry, max_deliveries=max_deliveries),
        ttl_s=ttl_s,
        retention_s=retention_s,
    )


task_ids = st.sampled_from(TASK_IDS)
lease_fors = st.sampled_from((1.0, 10.0, 30.0))
forges = st.sampled_from(("exact",) * 4 + ("token", "generation", "worker", "task"))
offsets = st.sampled_from((0, 0, 0, -1, 1))
new_tasks = st.builds(
    new_task,
    task_id=task_ids,
    owner=st.sampled_from((*OWNERS, None)),
    tenant=st.sampled_from(TENANTS),
    queue=st.sampled_from(QUEUES),
    watcher=st.sampled_from((None, *OWNERS)),
    retry=st.sampled_from(
        (
            RetryPolicy.none(),
            RetryPolicy.fixed(2.0, attempts=2),
            RetryPolicy.exponential(1.0, attempts=3, cap=3.0),
        )
    ),
    max_deliveries=st.sampled_from((25, 1, 2)),
    ttl_s=st.sampled_from((None, None, 3.0, 20.0)),
    retention_s=st.sampled_from((None, 0.0, 5.0)),
)
MEMBER = "member"
"""Stands for a principal entitled to the task: its owner (System for an ownerless task)."""
principals = st.sampled_from(
    (MEMBER, MEMBER, *OWNERS, System(), System("acme"), System("default"))
)
queries = st.builds(
    TaskQuery,
    tenant=st.sampled_from((None, *TENANTS)),
    principal=st.sampled_from((None, *OWNERS)),
    statuses=st.sampled_from(
        (
            None,
            frozenset({TaskStatus.PENDING}),
            frozenset({TaskStatus.RUNNING}),
            frozenset({TaskStatus.WAITING_INPUT}),
            frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}),
        )
    ),
    queue=st.sampled_from((None, *QUEUES)),
    after=st.sampled_from((None, None, "t2")),
    limit=st.sampled_from((1, 2, 100)),
)


# -- comparing results ------------------------------------------------------------------


@dataclass
class Result:
    """What one store call did: a value or an exception."""

    value: Any = None
    error: Exception | None = None


def norm_snapshot(snapshot: Snapshot) -> dict[str, Any]:
    return snapshot.model_dump(mode="json", exclude={"run_id"})


def norm_lease(lease: Lease) -> dict[str, Any]:
    return lease.model_dump(mode="json", exclude={"token"})


def norm_record(record: EventRecord) -> dict[str, Any]:
    return record.model_dump(mode="json")


def normalize(value: Any) -> Any:
    """Strip what legitimately differs between two correct stores (run ids, tokens)."""
    if isinstance(value, Snapshot):
        return norm_snapshot(value)
    if isinstance(value, Claim):
        return {"snapshot": norm_snapshot(value.snapshot), "lease": norm_lease(value.lease)}
    if isinstance(value, Lease):
        return norm_lease(value)
    if isinstance(value, EventRecord):
        return norm_record(value)
    if isinstance(value, Transition):
        return {
            "outcome": value.outcome,
            "snapshot": norm_snapshot(value.snapshot),
            "record": norm_record(value.record) if value.record else None,
        }
    if isinstance(value, list | tuple):
        return [normalize(item) for item in value]
    return value


def norm_error(error: Exception) -> dict[str, Any]:
    data: dict[str, Any] = {"error": type(error).__name__}
    if isinstance(error, RevisionConflict | TaskExists):
        data["current"] = norm_snapshot(error.current)
    if isinstance(error, RevisionConflict):
        data["expected"] = error.expected
    if isinstance(error, Deferred):
        data["seconds"] = error.seconds
    if isinstance(error, CapacityExceeded):
        data["limit"] = error.limit
    if isinstance(error, TaskNotFound):
        data["task_id"] = error.task_id
    return data


def norm_result(result: Result) -> Any:
    if result.error is not None:
        return norm_error(result.error)
    return {"ok": normalize(result.value)}


def differences_between(store: Any, reference: Any, path: str = "") -> list[str]:
    """Human-readable paths where two normalized values differ."""
    if isinstance(store, Mapping) and isinstance(reference, Mapping):
        found: list[str] = []
        for key in sorted(set(store) | set(reference), key=str):
            found += differences_between(store.get(key), reference.get(key), f"{path}.{key}")
        return found
    if isinstance(store, list) and isinstance(reference, list) and len(store) == len(reference):
        found = []
        for index, (left, right) in enumerate(zip(store, reference, strict=True)):
            found += differences_between(left, right, f"{path}[{index}]")
        return found
    if store == reference:
        return []
    return [f"{path or '<result>'}: store={brief(store)} reference={brief(reference)}"]


def outline(result: Result) -> str:
    """One line on what a call did: the error it raised, or what it returned."""
    if result.error is not None:
        return f"raised {result.error!r}"
    value = normalize(result.value)
    if isinstance(value, Mapping) and "outcome" in value:
        value = {"outcome": value["outcome"], "revision": value["snapshot"].get("revision")}
    return f"returned {brief(value)}"


def brief(value: Any) -> str:
    """A short repr: lists of snapshots by their ids, long text cut."""
    if isinstance(value, list) and all(isinstance(v, Mapping) for v in value):
        value = [v.get("id") or v.get("snapshot", {}).get("id") or "…" for v in value]
    text = repr(value)
    return text if len(text) <= 300 else text[:297] + "..."


def snapshots_in(value: Any) -> list[Snapshot]:
    """Every snapshot a result or error carries, in a fixed order."""
    if isinstance(value, Snapshot):
        return [value]
    if isinstance(value, Claim):
        return [value.snapshot]
    if isinstance(value, Transition):
        return [value.snapshot]
    if isinstance(value, RevisionConflict | TaskExists):
        return [value.current]
    if isinstance(value, list | tuple):
        return [s for item in value for s in snapshots_in(item)]
    return []


def forged(lease: Lease, how: str) -> Lease:
    """``lease`` altered in one field (``exact``: unchanged)."""
    if how == "token":
        return lease.model_copy(update={"token": "forged-token"})
    if how == "generation":
        older = lease.generation - 1 if lease.generation > 1 else lease.generation + 1
        return lease.model_copy(update={"generation": older})
    if how == "worker":
        return lease.model_copy(update={"worker_id": "intruder"})
    if how == "task":
        other = TASK_IDS[(TASK_IDS.index(lease.task_id) + 1) % len(TASK_IDS)]
        return lease.model_copy(update={"task_id": other})
    return lease
