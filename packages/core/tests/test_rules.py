"""The pure state-machine functions of ``tasks_core.rules`` (no store involved)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from tasks_core import (
    Access,
    AuthorizationError,
    Cancelled,
    ClaimInfo,
    Completed,
    Event,
    Failed,
    InputRequested,
    InputResponsesAccepted,
    InvalidInput,
    Lease,
    LeaseLost,
    Owner,
    RetryRequested,
    RevisionConflict,
    Snapshot,
    System,
    TaskNotFound,
    TaskStatus,
    Unavailable,
    WatcherAdded,
    rules,
)

ALICE = Owner("alice")
BOB = Owner("bob")
MS = timedelta(milliseconds=1)


def _claim(snapshot: Snapshot, now: datetime, lease_for: float = 30) -> tuple[Snapshot, str, Lease]:
    new, token, lease, failure = rules.start_claim(snapshot, "w1", lease_for, now)
    assert failure is None
    assert lease is not None
    return new, token, lease


def _apply(snapshot: Snapshot, event: Event, at: datetime) -> Snapshot:
    applied = rules.apply_event(snapshot, event, at)
    assert applied is not None
    return applied[0]


# -- time --------------------------------------------------------------------------------


def test_tick_truncates_to_whole_milliseconds_in_utc() -> None:
    """Store instants MUST be UTC and whole milliseconds; naive values are taken as UTC."""
    plus_two = timezone(timedelta(hours=2))
    assert datetime(2030, 1, 1, 10, 0, 0, 123000, tzinfo=UTC) == rules.tick(
        datetime(2030, 1, 1, 12, 0, 0, 123999, tzinfo=plus_two)
    )
    assert datetime(2030, 1, 1, tzinfo=UTC) == rules.tick(datetime(2030, 1, 1, 0, 0, 0, 999))


def test_commit_time_strictly_increases_even_if_the_clock_does_not(
    snapshot: Snapshot, now: datetime
) -> None:
    """``next_commit_time`` MUST be after the last write, and ``now`` when that is later."""
    assert snapshot.updated_at + MS == rules.next_commit_time(snapshot, now)
    assert snapshot.updated_at + MS == rules.next_commit_time(snapshot, now - timedelta(hours=1))
    assert now + timedelta(seconds=5) == rules.next_commit_time(
        snapshot, now + timedelta(seconds=5)
    )


# -- claims and leases -------------------------------------------------------------------


def test_running_is_derived_from_a_live_lease(snapshot: Snapshot, now: datetime) -> None:
    """Stored status stays ``pending``; readers see ``running`` only while the lease lives."""
    claimed, _, _ = _claim(snapshot, now, lease_for=10)
    assert TaskStatus.PENDING == claimed.status
    assert TaskStatus.RUNNING == rules.present(claimed, now).status
    assert TaskStatus.PENDING == rules.present(claimed, now + timedelta(seconds=10)).status


def test_each_claim_raises_the_generation_and_counts_a_delivery(
    snapshot: Snapshot, now: datetime
) -> None:
    """A claim MUST get generation previous + 1 and count one delivery."""
    first, _, lease1 = _claim(snapshot, now, lease_for=1)
    second, _, lease2 = _claim(first, now + timedelta(seconds=2))
    assert (1, 2) == (lease1.generation, lease2.generation)
    assert 2 == second.deliveries
    assert now + timedelta(seconds=32) == lease2.expires_at


def test_claim_past_the_delivery_limit_fails_the_task(snapshot: Snapshot, now: datetime) -> None:
    """Beyond ``max_deliveries`` a claim MUST record a ``failed`` event instead."""
    work = snapshot.work.model_copy(update={"max_deliveries": 1})
    task, _, _ = _claim(snapshot.model_copy(update={"work": work}), now, lease_for=1)
    failed, token, lease, record = rules.start_claim(task, "w2", 30, now + timedelta(seconds=5))
    assert (None, "") == (lease, token)
    assert record is not None
    assert ("store:delivery-limit", "failed") == (record.event_id, failed.status)
    assert failed.error is not None
    assert ("DeliveryLimitExceeded", "exceeded 1 delivery") == (
        failed.error.type,
        failed.error.message,
    )


def test_renew_issues_a_new_token_and_the_old_lease_goes_stale(
    snapshot: Snapshot, now: datetime
) -> None:
    """``renew`` MUST return a new token; the old lease MUST then be refused."""
    claimed, token, lease = _claim(snapshot, now)
    renewed, new_token, new_lease = rules.renew(claimed, token, lease, 60, now + MS)
    assert token != new_token
    assert lease.generation == new_lease.generation
    rules.check_lease(renewed, new_token, new_lease, now + MS)
    with pytest.raises(LeaseLost):
        rules.check_lease(renewed, new_token, lease, now + MS)


def test_an_expired_lease_is_lost_but_can_still_release(snapshot: Snapshot, now: datetime) -> None:
    """Expiry MUST fail every lease check except ``release``."""
    claimed, token, lease = _claim(snapshot, now, lease_for=1)
    later = now + timedelta(seconds=1)
    with pytest.raises(LeaseLost, match="expired"):
        rules.check_lease(claimed, token, lease, later)
    released = rules.release(claimed, token, lease, later)
    assert rules.is_claimable(released, later)


@pytest.mark.parametrize("seconds", [0, -1, 7 * 86400 + 1, True, float("nan")])
def test_lease_durations_are_validated(seconds: float) -> None:
    """``lease_for`` MUST be a number of seconds in (0, 7 days]."""
    with pytest.raises(InvalidInput, match="lease_for"):
        rules.check_lease_for(seconds)


@pytest.mark.parametrize("worker_id", ["", "w" * 257, 7])
def test_a_claim_refuses_a_bad_worker_id(snapshot: Snapshot, now: datetime,
                                         worker_id: object) -> None:
    """``start_claim`` checks the claimer's id itself (1-256 characters): the lease and
    claim it makes are built from it unvalidated."""
    with pytest.raises(InvalidInput, match="worker_id"):
        rules.start_claim(snapshot, worker_id, 30, now)  # type: ignore[arg-type]


def test_a_claim_makes_a_lease_and_claim_as_validated_models_make_them(
    snapshot: Snapshot, now: datetime,
) -> None:
    """The lease and claim info ``start_claim`` builds equal those the models' own
    validation makes of the same values."""
    claimed, token, lease = _claim(snapshot, now)
    assert lease == Lease(task_id=snapshot.id, worker_id="w1", token=token, generation=1,
                          expires_at=rules.tick(now) + timedelta(seconds=30))
    assert claimed.claim == ClaimInfo(worker_id="w1", generation=1,
                                      expires_at=rules.tick(now) + timedelta(seconds=30))


def test_expired_tasks_are_not_claimable(snapshot: Snapshot, now: datetime) -> None:
    """A task past ``expires_at`` MUST NOT be claimable."""
    expired = snapshot.model_copy(update={"expires_at": now})
    assert not rules.is_claimable(expired, now)
    with pytest.raises(Unavailable):
        rules.check_claimable(expired, now)


def test_waiting_and_leased_tasks_are_unavailable(snapshot: Snapshot, now: datetime) -> None:
    """A task waiting for input or under a live lease MUST NOT be claimable."""
    claimed, _, _ = _claim(snapshot, now)
    waiting = snapshot.model_copy(update={"status": TaskStatus.WAITING_INPUT})
    for task in (claimed, waiting):
        assert not rules.is_claimable(task, now)
        with pytest.raises(Unavailable):
            rules.check_claimable(task, now)


# -- events ------------------------------------------------------------------------------

EVERY_EVENT: list[Event] = [
    InputRequested(event_id="e", key="k"),
    InputResponsesAccepted(event_id="e", responses={"k": 1}),
    RetryRequested(event_id="e", error="Boom"),
    Completed(event_id="e"),
    Failed(event_id="e", error="Boom"),
    Cancelled(event_id="e"),
    WatcherAdded(event_id="e", principal=BOB),
]


@pytest.mark.parametrize("event", EVERY_EVENT, ids=lambda e: e.kind)
def test_every_event_on_a_terminal_task_is_unchanged(
    snapshot: Snapshot, now: datetime, event: Event
) -> None:
    """Nothing MUST change a finished task: every event kind is a no-op (``None``)."""
    finished = _apply(snapshot, Completed(event_id="done"), now)
    assert rules.apply_event(finished, event, now + MS) is None


def test_terminal_event_of_the_holder_ends_the_lease_at_commit(
    snapshot: Snapshot, now: datetime
) -> None:
    """``completed`` MUST end the holder's lease at the commit instant."""
    claimed, _, _ = _claim(snapshot, now)
    done = _apply(claimed, Completed(event_id="c", result=1), now + MS)
    assert done.claim is not None
    assert now + MS == done.claim.expires_at
    assert (1, 1) == (done.revision, done.result)


def test_cancel_keeps_the_lease_live_so_the_holder_hears_it(
    snapshot: Snapshot, now: datetime
) -> None:
    """``cancelled`` MUST leave the lease live; the holder learns on its next renew."""
    claimed, token, lease = _claim(snapshot, now)
    cancelled = _apply(claimed, Cancelled(event_id="x"), now + MS)
    assert (TaskStatus.CANCELLED, "Cancelled by user") == (
        cancelled.status,
        cancelled.error and cancelled.error.message,
    )
    renewed, _, _ = rules.renew(cancelled, token, lease, 30, now + 2 * MS)
    assert TaskStatus.CANCELLED == renewed.status


def test_repeated_input_key_unmatched_answer_and_known_watcher_are_unchanged(
    snapshot: Snapshot, now: datetime
) -> None:
    """A key asked twice, an answer to no outstanding key and a watcher granted twice MUST
    be no-ops."""
    asked = _apply(snapshot, InputRequested(event_id="a", key="approve"), now)
    assert TaskStatus.WAITING_INPUT == asked.status
    assert rules.apply_event(asked, InputRequested(event_id="b", key="approve"), now) is None
    unmatched = InputResponsesAccepted(event_id="c", responses={"other": 1})
    assert rules.apply_event(asked, unmatched, now) is None
    answered = _apply(asked, InputResponsesAccepted(event_id="d", responses={"approve": 1}), now)
    assert (TaskStatus.PENDING, {"approve": 1}) == (
        answered.status,
        answered.accepted_input_responses,
    )
    watched = _apply(snapshot, WatcherAdded(event_id="w", principal=BOB), now)
    assert rules.apply_event(watched, WatcherAdded(event_id="w2", principal=BOB), now) is None
    assert rules.apply_event(snapshot, WatcherAdded(event_id="w3", principal=ALICE), now) is None


def test_watcher_from_another_tenant_is_refused(snapshot: Snapshot, now: datetime) -> None:
    """A watcher MUST belong to the task's tenant."""
    with pytest.raises(InvalidInput):
        rules.apply_event(snapshot, WatcherAdded(event_id="w", principal=Owner("x", "t")), now)


# -- authority ---------------------------------------------------------------------------


def test_tenant_visibility_lets_others_read_but_not_cancel(
    snapshot: Snapshot, now: datetime
) -> None:
    """Under ``visibility="tenant"`` another principal MAY read but MUST NOT cancel."""
    bob = Access(principal=BOB, visibility="tenant")
    rules.check_request(snapshot, bob, "read", now)
    with pytest.raises(AuthorizationError):
        rules.check_request(snapshot, bob, "cancel", now)
    with pytest.raises(TaskNotFound):
        rules.check_request(snapshot, Access(principal=BOB, visibility="watchers"), "read", now)


def test_owner_watcher_and_system_may_cancel(snapshot: Snapshot, now: datetime) -> None:
    """Owner, watchers and System MUST hold every request right but ``grant``."""
    watched = snapshot.model_copy(update={"watchers": (BOB,)})
    for principal in (ALICE, BOB, System(), System("default")):
        rules.check_request(
            watched, Access(principal=principal, visibility="watchers"), "cancel", now
        )
    with pytest.raises(AuthorizationError):
        rules.check_request(watched, Access(principal=ALICE, visibility="watchers"), "grant", now)


def test_expired_tasks_read_as_missing(snapshot: Snapshot, now: datetime) -> None:
    """Request access to an expired task MUST raise TaskNotFound, even for System."""
    expired = snapshot.model_copy(update={"expires_at": now})
    with pytest.raises(TaskNotFound):
        rules.check_request(expired, Access(principal=System(), visibility="watchers"), "read", now)


def test_request_access_never_authorizes_worker_events(snapshot: Snapshot, now: datetime) -> None:
    """The owner MUST NOT send ``completed``: that takes the lease."""
    owner = Access(principal=ALICE, visibility="watchers")
    with pytest.raises(AuthorizationError):
        rules.authorize_event(snapshot, None, owner, Completed(event_id="c"), now, replayed=False)


def test_the_exact_lease_may_replay_after_it_ended(snapshot: Snapshot, now: datetime) -> None:
    """The lease that sent an event MUST pass for a replay of it after the lease ended."""
    claimed, token, lease = _claim(snapshot, now, lease_for=1)
    event = Completed(event_id="c")
    done = _apply(claimed, event, now + MS)
    later = now + timedelta(seconds=5)
    rules.authorize_event(done, token, lease, event, later, replayed=True)
    with pytest.raises(LeaseLost):
        rules.authorize_event(done, token, lease, event, later, replayed=False)


# -- replace -----------------------------------------------------------------------------


def test_only_a_finished_run_at_its_revision_can_be_replaced(
    snapshot: Snapshot, now: datetime
) -> None:
    """Replacing a live task MUST raise Unavailable; a stale revision RevisionConflict."""
    with pytest.raises(Unavailable):
        rules.check_replace(snapshot, snapshot, now)
    finished = _apply(snapshot, Cancelled(event_id="x"), now)
    with pytest.raises(RevisionConflict):
        rules.check_replace(finished, snapshot, now)
    rules.check_replace(finished, finished, now)
    expired = snapshot.model_copy(update={"expires_at": now})
    rules.check_replace(expired, expired, now)


def test_lease_tokens_made_together_are_each_a_fresh_lease_token() -> None:
    import base64

    tokens = rules.new_lease_tokens(50)
    single = rules.new_lease_token()
    assert len(tokens) == 50
    assert len(set(tokens)) == 50
    for token in [*tokens, single]:
        assert len(token) == len(single) == 24
        assert len(base64.urlsafe_b64decode(token)) == 18  # 144 random bits
        assert base64.urlsafe_b64encode(base64.urlsafe_b64decode(token)).decode() == token
    assert rules.new_lease_tokens(0) == []
    assert rules.new_lease_tokens(1)[0] != rules.new_lease_tokens(1)[0]
