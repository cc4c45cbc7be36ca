"""Edges of the pure rules that no store path reaches alone, pinned down by the mutation
run (``nox -s mutants``): ``updated_at`` of every lease operation, the listing filter
``rules.matches`` on its own, and ``storekit.ClaimScan``'s fetch groups, its custom
``start`` and the withdrawal of a failure."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from tasks_core import (
    Access,
    AuthorizationError,
    Cancelled,
    Completed,
    ErrorInfo,
    Event,
    Failed,
    InputRequested,
    Lease,
    LeaseLost,
    NewTask,
    Owner,
    RetryPolicy,
    RetryRequested,
    RevisionConflict,
    Snapshot,
    System,
    TaskNotFound,
    TaskQuery,
    TaskStatus,
    WatcherAdded,
    Work,
    rules,
    storekit,
)

ALICE = Owner("alice")
LATER = timedelta(seconds=5)
MS = timedelta(milliseconds=1)


def _task(task_id: str, queue: str, at: datetime, tenant: str = "default", **work: object
          ) -> Snapshot:
    new = NewTask(id=task_id, tenant=tenant, owner=Owner("alice", tenant), queue=queue,
                  work=Work(name="job", **work))  # type: ignore[arg-type]
    return rules.new_snapshot(new, at)


def test_renew_release_and_progress_move_updated_at_to_now(snapshot: Snapshot, now: datetime
                                                           ) -> None:
    """``renew``, ``release`` and ``report_progress`` MUST set ``updated_at`` to ``now``."""
    claimed, token, lease, _ = rules.start_claim(snapshot, "w1", 60, now, held=True)
    assert claimed.claim is not None
    assert claimed.claim.held is True
    renewed, token, lease = rules.renew(claimed, token, lease, 60, now + LATER)
    assert now + LATER == renewed.updated_at
    assert renewed.claim is not None
    assert renewed.claim.held is False  # held no more
    progressed = rules.report_progress(renewed, token, lease, 50, None, now + 2 * LATER)
    assert now + 2 * LATER == progressed.updated_at
    released = rules.release(progressed, token, lease, now + 3 * LATER)
    assert now + 3 * LATER == released.updated_at


def test_matches_drops_expired_tasks_and_other_tenants(now: datetime) -> None:
    """A listing MUST NOT show an expired task nor, for a tenant's query, another
    tenant's task."""
    mine, theirs = _task("a::1", "q", now), _task("b::1", "q", now, tenant="other")
    query = TaskQuery(tenant="default")
    assert rules.matches(mine, query, now)
    assert not rules.matches(theirs, query, now)
    assert rules.matches(theirs, TaskQuery(tenant=None), now)
    expired = mine.model_copy(update={"expires_at": now})
    assert not rules.matches(expired, query, now)
    assert not rules.matches(expired, TaskQuery(tenant=None), now)


def test_fetches_groups_shared_queues_and_each_open_exclusive_one(now: datetime) -> None:
    """``fetches``: the shared queues together (none when there are none, or nothing is
    left to claim), each open exclusive queue for one task."""
    only_exclusive = storekit.check_claim_next("w1", 30, ["x", "y"], 3, ["x", "y"])
    scan = storekit.ClaimScan(only_exclusive, now, busy=["y"])
    assert [(["x"], 1)] == scan.fetches()
    both = storekit.check_claim_next("w1", 30, ["a", "x"], 1, ["x"])
    scan = storekit.ClaimScan(both, now)
    assert [(["a"], 1), (["x"], 1)] == scan.fetches()
    assert scan.offer(_task("a::1", "a", now)) is not None
    assert [] == scan.fetches()  # the limit is reached


def test_a_scan_claims_with_its_own_start(now: datetime) -> None:
    """``ClaimScan(start=...)`` MUST decide every claim with the given function (the
    contract suite's broken stores replace it)."""
    calls: list[str] = []

    def start(snapshot: Snapshot, worker_id: str, lease_for: float, at: datetime, *,
              held: bool = False) -> tuple:  # type: ignore[type-arg]
        calls.append(snapshot.id)
        return rules.start_claim(snapshot, worker_id, lease_for, at, held=held)

    scan = storekit.ClaimScan(storekit.check_claim_next("w1", 30, ["q"], 2, ()), now,
                              start=start)
    assert scan.offer(_task("a::1", "q", now)) is not None
    assert ["a::1"] == calls


def test_withdraw_forgets_a_failure_whose_write_was_lost(now: datetime) -> None:
    """A task failed past its delivery limit whose write was lost MUST leave
    ``failures`` when withdrawn (nothing is reported for it)."""
    scan = storekit.ClaimScan(storekit.check_claim_next("w1", 30, ["q"], 1, ()), now)
    spent = _task("a::1", "q", now, max_deliveries=1).model_copy(update={"deliveries": 1})
    failed = scan.offer(spent)
    assert failed is not None
    assert failed.claim is None
    scan.withdraw(failed)
    assert [] == scan.failures
    scan.report()


def test_request_access_sending_a_worker_event_is_refused_as_unauthorized(
    snapshot: Snapshot, now: datetime
) -> None:
    """Request access never authorizes a worker event: a principal who may read the task
    (``visibility="tenant"``, not a member) gets ``AuthorizationError``; one who may not
    see it gets ``TaskNotFound``, exactly as for a missing task."""
    reader = Access(principal=Owner("bob"), visibility="tenant")
    with pytest.raises(AuthorizationError, match="worker events"):
        rules.authorize_event(snapshot, None, reader, Completed(event_id="e"), now,
                              replayed=False)
    outsider = Access(principal=Owner("bob", tenant="other"), visibility="tenant")
    with pytest.raises(TaskNotFound):
        rules.authorize_event(snapshot, None, outsider, Completed(event_id="e"), now,
                              replayed=False)


# -- survivors of the mutation run (issue 33): events, access, leases --------------------


def _claimed(snapshot: Snapshot, now: datetime) -> tuple[Snapshot, str, Lease]:
    new, token, lease, failure = rules.start_claim(snapshot, "w1", 30, now)
    assert failure is None
    assert lease is not None
    return new, token, lease


def _applied(snapshot: Snapshot, event: Event, at: datetime) -> Snapshot:
    applied = rules.apply_event(snapshot, event, at)
    assert applied is not None
    return applied[0]


def test_a_terminal_event_drops_the_outstanding_input_requests(snapshot: Snapshot,
                                                               now: datetime) -> None:
    """Cancelling a task waiting for input MUST leave no input request outstanding."""
    waiting = _applied(snapshot, InputRequested(event_id="i", key="k"), now + MS)
    assert {"k"} == set(waiting.input_requests)
    cancelled = _applied(waiting, Cancelled(event_id="c"), now + 2 * MS)
    assert {} == cancelled.input_requests


def test_a_retry_of_a_task_waiting_for_input_makes_it_pending(snapshot: Snapshot,
                                                             now: datetime) -> None:
    """A retry (allowed by the policy) MUST store the task ``pending``, whatever it was,
    and end the claim of the run that asked for it."""
    retrying = snapshot.model_copy(update={"work": Work(
        name="job", retry_policy=RetryPolicy.fixed(10, attempts=3))})
    claimed, _, _ = _claimed(retrying, now)
    waiting = _applied(claimed, InputRequested(event_id="i", key="k"), now + MS)
    assert TaskStatus.WAITING_INPUT == waiting.status
    retried = _applied(waiting, RetryRequested(event_id="r", error="Boom"), now + 2 * MS)
    assert TaskStatus.PENDING == retried.status
    assert retried.claim is not None
    assert retried.claim.ended is True
    assert now + 2 * MS == retried.claim.expires_at


def test_the_last_retry_fails_the_task_with_its_own_failure(snapshot: Snapshot,
                                                             now: datetime) -> None:
    """A retry past the policy's attempts MUST fail the task at the commit instant, with
    this failure as ``error`` and ``last_failure``, and end the claim."""
    retrying = snapshot.model_copy(update={"work": Work(
        name="job", retry_policy=RetryPolicy.fixed(0, attempts=2))})
    first, _, _ = _claimed(retrying, now)
    again = _applied(first, RetryRequested(event_id="r1", error="First"), now + MS)
    assert ErrorInfo(type="First", message="") == again.last_failure
    second, _, _ = _claimed(again, now + 2 * MS)
    failed = _applied(second, RetryRequested(event_id="r2", error="Second"), now + 3 * MS)
    assert TaskStatus.FAILED == failed.status
    assert now + 3 * MS == failed.finished_at
    assert ErrorInfo(type="Second", message="") == failed.error
    assert ErrorInfo(type="Second", message="") == failed.last_failure
    assert failed.claim is not None
    assert failed.claim.ended is True
    assert now + 3 * MS == failed.claim.expires_at


def test_failed_ends_the_claim_at_the_commit_instant(snapshot: Snapshot, now: datetime
                                                     ) -> None:
    """``Failed`` MUST finish the task at the commit instant and end its claim."""
    claimed, _, _ = _claimed(snapshot, now)
    failed = _applied(claimed, Failed(event_id="f", error="Boom"), now + MS)
    assert now + MS == failed.finished_at
    assert failed.claim is not None
    assert failed.claim.ended is True
    assert now + MS == failed.claim.expires_at


def test_only_a_retry_record_carries_retry_at(snapshot: Snapshot, now: datetime) -> None:
    """A history record carries ``retry_at`` for ``retry_requested`` only, even when the
    task still has one pending."""
    retrying = snapshot.model_copy(update={"work": Work(
        name="job", retry_policy=RetryPolicy.fixed(10, attempts=3))})
    claimed, _, _ = _claimed(retrying, now)
    applied = rules.apply_event(claimed, RetryRequested(event_id="r", error="Boom"), now + MS)
    assert applied is not None
    retried, record = applied
    assert now + MS + timedelta(seconds=10) == record.retry_at
    after = rules.apply_event(retried, WatcherAdded(event_id="w", principal=Owner("bob")),
                              now + 2 * MS)
    assert after is not None
    assert after[0].retry_at is not None
    assert after[1].retry_at is None


def test_an_event_on_a_presented_snapshot_stores_pending(snapshot: Snapshot, now: datetime
                                                         ) -> None:
    """``running`` is only ever derived: an event applied to the snapshot as read
    (``running``) MUST store ``pending``."""
    claimed, _, _ = _claimed(snapshot, now)
    running = rules.present(claimed, now)
    assert TaskStatus.RUNNING == running.status
    new = _applied(running, WatcherAdded(event_id="w", principal=Owner("bob")), now + MS)
    assert TaskStatus.PENDING == new.status


def test_decide_transition_uses_the_given_lease_check(snapshot: Snapshot, now: datetime
                                                      ) -> None:
    """``lease_check`` MUST replace ``check_lease`` (the contract suite's broken stores)."""
    claimed, token, lease = _claimed(snapshot, now)

    def refuse(*args: object, **kwargs: object) -> None:
        raise LeaseLost("refused by the custom check")

    with pytest.raises(LeaseLost, match="custom"):
        rules.decide_transition(claimed, token, None, claimed.revision,
                                Completed(event_id="e"), lease, now, lease_check=refuse)


def test_a_revision_conflict_carries_the_task_as_read_at_now(snapshot: Snapshot,
                                                             now: datetime) -> None:
    """``RevisionConflict`` MUST carry the current task as a reader sees it at ``now``."""
    claimed, _, _ = _claimed(snapshot, now)
    system = Access(principal=System(), visibility="watchers")
    with pytest.raises(RevisionConflict) as refused:
        rules.decide_transition(claimed, None, None, claimed.revision + 1,
                                Cancelled(event_id="c"), system, now)
    assert TaskStatus.RUNNING == refused.value.current.status


def test_check_lease_refuses_a_missing_token_or_claim(snapshot: Snapshot, now: datetime
                                                       ) -> None:
    """No stored token, or no claim at all: ``LeaseLost`` for any lease."""
    claimed, token, lease = _claimed(snapshot, now)
    rules.check_lease(claimed, token, lease, now)
    with pytest.raises(LeaseLost):
        rules.check_lease(claimed, None, lease, now)
    with pytest.raises(LeaseLost):
        rules.check_lease(snapshot, token, lease, now)


def test_a_worker_event_with_request_access_to_an_expired_task_is_not_found(
    now: datetime
) -> None:
    """Request access sending a worker event to an expired task: ``TaskNotFound``."""
    expiring = _task("alice::t", "q", now).model_copy(update={"expires_at": now + MS})
    alice = Access(principal=Owner("alice"), visibility="watchers")
    with pytest.raises(AuthorizationError):
        rules.authorize_event(expiring, None, alice, Completed(event_id="e"), now,
                              replayed=False)
    with pytest.raises(TaskNotFound):
        rules.authorize_event(expiring, None, alice, Completed(event_id="e"), now + MS,
                              replayed=False)


def test_a_claim_clears_retry_at_and_progress_and_moves_updated_at(
    snapshot: Snapshot, now: datetime
) -> None:
    """``start_claim`` MUST clear ``retry_at`` and ``progress`` and set ``updated_at`` to
    ``now``."""
    claimed, token, lease = _claimed(snapshot, now)
    progressed = rules.report_progress(claimed, token, lease, 50, None, now + MS)
    assert progressed.progress is not None
    stale = progressed.model_copy(update={"retry_at": now + 2 * MS})
    later = now + timedelta(seconds=60)
    again, _, _ = _claimed(stale, later)
    assert again.retry_at is None
    assert again.progress is None
    assert later == again.updated_at
