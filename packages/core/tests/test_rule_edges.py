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
    Completed,
    NewTask,
    Owner,
    Snapshot,
    TaskNotFound,
    TaskQuery,
    Work,
    rules,
    storekit,
)

ALICE = Owner("alice")
LATER = timedelta(seconds=5)


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
