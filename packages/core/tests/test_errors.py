"""The error tree: its shape, its default messages, and a real way to reach every class."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
import tasks_core
from tasks_core import (
    Access,
    AuthorizationError,
    Cancelled,
    CapabilityNotSupported,
    CapacityExceeded,
    Completed,
    Deferred,
    EventIdReused,
    EventRecord,
    InvalidInput,
    LeaseLost,
    NewTask,
    Owner,
    PluginConflict,
    RetryPolicy,
    RevisionConflict,
    Snapshot,
    StoreCorrupt,
    StoreError,
    StoreUnavailable,
    System,
    TaskExists,
    TaskNotFound,
    TasksError,
    TaskStatus,
    TaskTimeout,
    Unavailable,
    UnknownStore,
    Work,
    errors,
    find_store,
    open_store,
    rules,
)

ERROR_CLASSES = [getattr(errors, name) for name in errors.__all__]
NO_ARGUMENT_CLASSES = [
    TasksError,
    EventIdReused,
    LeaseLost,
    Unavailable,
    AuthorizationError,
    InvalidInput,
    UnknownStore,
    TaskTimeout,
    CapabilityNotSupported,
    StoreError,
    StoreUnavailable,
    PluginConflict,
]


def _tree() -> list[tuple[str, str]]:
    """(class, parent) pairs as drawn in ``errors.py``'s docstring."""
    parents = ["TasksError"]
    pairs = []
    for line in (errors.__doc__ or "").splitlines():
        found = re.search(r"[├└]── (\w+)", line)
        if found is None:
            continue
        depth = found.start() // 4
        del parents[depth:]
        pairs.append((found.group(1), parents[-1]))
        parents.append(found.group(1))
    return pairs


# -- shape -------------------------------------------------------------------------------


def test_drawn_tree_names_every_error_class_once() -> None:
    """The docstring tree MUST list exactly the exported classes (and the root)."""
    drawn = [name for name, _ in _tree()]
    assert sorted(set(errors.__all__) - {"TasksError"}) == sorted(drawn)


@pytest.mark.parametrize(("name", "parent"), _tree())
def test_each_class_derives_from_the_parent_drawn_in_the_tree(name: str, parent: str) -> None:
    """Each class MUST have the parent the docstring draws as its first base."""
    cls = getattr(errors, name)
    assert getattr(errors, parent) is cls.__bases__[0]


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (TaskNotFound, LookupError),
        (AuthorizationError, PermissionError),
        (InvalidInput, ValueError),
        (UnknownStore, ValueError),
        (UnknownStore, LookupError),
    ],
)
def test_errors_share_the_builtin_whose_meaning_they_share(
    cls: type[Exception], builtin: type[Exception]
) -> None:
    """Callers catching the builtin MUST catch the tasks error too."""
    assert issubclass(cls, builtin)


@pytest.mark.parametrize("cls", ERROR_CLASSES)
def test_every_error_is_a_tasks_error_and_exported_from_the_package(cls: type) -> None:
    """Every class MUST be catchable as TasksError and importable from ``tasks_core``."""
    assert issubclass(cls, TasksError)
    assert cls is getattr(tasks_core, cls.__name__)


# -- messages ----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", NO_ARGUMENT_CLASSES)
def test_default_message_is_the_first_docstring_line(cls: type[TasksError]) -> None:
    """Raised without a message, an error MUST say the first line of its docstring."""
    assert (cls.__doc__ or "").strip().splitlines()[0] == str(cls())


def test_explicit_message_replaces_the_default() -> None:
    """A message given at the raise site MUST be the error's text."""
    assert "The lease has expired" == str(LeaseLost("The lease has expired"))
    assert "The lease is stale, expired, or was never issued for this task." == str(LeaseLost())


def test_store_corrupt_names_the_task_and_cannot_quote_stored_text() -> None:
    """StoreCorrupt MUST name the task only: it takes no message that could carry data."""
    error = StoreCorrupt("t1")
    assert ("The stored record of task 't1' failed validation",) == error.args
    assert "t1" == error.task_id
    with pytest.raises(TypeError):
        StoreCorrupt("t1", "password=hunter2")  # type: ignore[call-arg]


# -- reached through real code paths -----------------------------------------------------


def _claimed(snapshot: Snapshot, now: datetime) -> tuple[Snapshot, str, tasks_core.Lease]:
    new, token, lease, _ = rules.start_claim(snapshot, "w1", 30, now)
    assert lease is not None
    return new, token, lease


def test_task_not_found_reads_the_same_for_missing_and_foreign_tasks(
    snapshot: Snapshot, now: datetime
) -> None:
    """An invisible task MUST be reported exactly like a missing one (no existence oracle)."""
    with pytest.raises(TaskNotFound) as foreign:
        rules.check_request(
            snapshot, Access(principal=Owner("bob", "other"), visibility="tenant"), "read", now
        )
    assert "Task not found: 'alice::job'" == str(foreign.value)
    assert "alice::job" == foreign.value.task_id
    assert str(TaskNotFound("alice::job")) == str(foreign.value)


@pytest.mark.anyio
async def test_task_not_found_from_a_store_lookup() -> None:
    """``get`` of an unknown id MUST raise TaskNotFound (a LookupError) naming the id."""
    async with open_store("memory://") as store:
        with pytest.raises(LookupError, match="Task not found: 'nope'"):
            await store.get("nope", tenant=None)


@pytest.mark.anyio
async def test_task_exists_carries_the_current_snapshot() -> None:
    """Creating a taken id MUST raise TaskExists with the current task."""
    new = NewTask(id="k", tenant="default", owner=Owner("alice"), work=Work(name="job"))
    async with open_store("memory://") as store:
        created = await store.create(new)
        with pytest.raises(TaskExists) as info:
            await store.create(new)
    assert created == info.value.current


@pytest.mark.anyio
async def test_capacity_exceeded_names_the_limit_and_is_retryable() -> None:
    """A full store MUST raise CapacityExceeded naming the limit."""
    async with open_store("memory://", max_tasks=1) as store:
        await store.create(NewTask(id="a", tenant="default", owner=None, work=Work(name="j")))
        with pytest.raises(CapacityExceeded) as info:
            await store.create(NewTask(id="b", tenant="default", owner=None, work=Work(name="j")))
    assert ("max_tasks", True) == (info.value.limit, info.value.retryable)


@pytest.mark.anyio
async def test_store_corrupt_from_a_damaged_record() -> None:
    """A record that fails validation MUST read as StoreCorrupt naming only its id."""
    spec = find_store("memory://")
    assert spec.corrupt is not None
    async with open_store("memory://") as store:
        await store.create(NewTask(id="t1", tenant="default", owner=None, work=Work(name="j")))
        await spec.corrupt(store, "t1")
        with pytest.raises(StoreCorrupt) as info:
            await store.get("t1", tenant=None)
    assert str(StoreCorrupt("t1")) == str(info.value)


def test_revision_conflict_carries_current_and_expected(snapshot: Snapshot, now: datetime) -> None:
    """A stale expected revision MUST raise RevisionConflict with the current snapshot."""
    with pytest.raises(RevisionConflict) as info:
        rules.check_revision(snapshot, 3, now)
    assert (0, 3) == (info.value.current.revision, info.value.expected)
    assert "(expected 3, current 0)" in str(info.value)


def test_event_id_reused_with_other_content(snapshot: Snapshot, now: datetime) -> None:
    """An applied event id sent again with other content MUST raise EventIdReused."""
    applied = rules.apply_event(snapshot, Completed(event_id="e1", result=1), now)
    assert applied is not None
    record: EventRecord = applied[1]
    rules.check_replay(record, Completed(event_id="e1", result=1))
    with pytest.raises(EventIdReused):
        rules.check_replay(record, Completed(event_id="e1", result=2))


def test_lease_lost_for_a_forged_token(snapshot: Snapshot, now: datetime) -> None:
    """A lease with another token MUST raise LeaseLost."""
    claimed, _, lease = _claimed(snapshot, now)
    with pytest.raises(LeaseLost):
        rules.check_lease(claimed, "forged", lease, now)


def test_unavailable_for_a_finished_task(snapshot: Snapshot, now: datetime) -> None:
    """Claiming a terminal task MUST raise Unavailable."""
    finished = snapshot.model_copy(update={"status": TaskStatus.COMPLETED})
    with pytest.raises(Unavailable):
        rules.check_claimable(finished, now)


def test_deferred_carries_the_seconds_until_the_retry(snapshot: Snapshot, now: datetime) -> None:
    """Claiming before ``retry_at`` MUST raise Deferred with the remaining seconds."""
    waiting = snapshot.model_copy(update={"retry_at": now + timedelta(seconds=2.5)})
    with pytest.raises(Deferred) as info:
        rules.check_claimable(waiting, now)
    assert 2.5 == info.value.seconds


def test_authorization_error_when_a_lease_sends_a_request_event(
    snapshot: Snapshot, now: datetime
) -> None:
    """A lease MUST NOT authorize a cancel: AuthorizationError (a PermissionError)."""
    claimed, token, lease = _claimed(snapshot, now)
    with pytest.raises(PermissionError, match="never authorizes request actions"):
        rules.authorize_event(claimed, token, lease, Cancelled(event_id="c"), now, replayed=False)


def test_invalid_input_from_a_bad_model_argument() -> None:
    """A bad constructor argument MUST raise InvalidInput (a ValueError), nothing else."""
    with pytest.raises(ValueError, match="attempts") as info:
        RetryPolicy.fixed(1.0, attempts=0)
    assert InvalidInput is type(info.value)


def test_unknown_store_from_the_registry() -> None:
    """An unserved scheme MUST raise UnknownStore."""
    with pytest.raises(UnknownStore, match="'nosuch'"):
        find_store("nosuch://x")


def test_system_principal_of_another_tenant_cannot_see(snapshot: Snapshot, now: datetime) -> None:
    """System("t") MUST see only tenant t: another tenant's task is TaskNotFound."""
    with pytest.raises(TaskNotFound):
        rules.check_request(
            snapshot, Access(principal=System("other"), visibility="watchers"), "read", now
        )
