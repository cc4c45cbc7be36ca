"""transition(): revision guards and every event kind."""

from __future__ import annotations

import pytest
from tasks_core import (
    Access,
    AuthorizationError,
    Cancelled,
    CancelReason,
    Completed,
    ErrorInfo,
    Event,
    Failed,
    InputRequested,
    InputResponsesAccepted,
    InvalidInput,
    ManualClock,
    Owner,
    RetryPolicy,
    RetryRequested,
    RevisionConflict,
    System,
    TaskNotFound,
    TaskStatus,
    TaskStore,
    WatcherAdded,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    ALICE,
    BOB,
    LEASE_S,
    MALLORY,
    SYSTEM,
    access,
    created_and_claimed,
    finished_task,
    new_task,
)

REQUEST_KINDS = ("cancelled", "input_responses_accepted", "watcher_added")
LEASE_KINDS = ("input_requested", "retry_requested", "completed", "failed")
TERMINAL_ENDS = ("completed", "failed", "cancelled")


def event_of(kind: str, event_id: str = "late") -> Event:
    """One valid event of ``kind``."""
    events: dict[str, Event] = {
        "input_requested": InputRequested(event_id=event_id, key="approve", request={"q": 1}),
        "input_responses_accepted": InputResponsesAccepted(
            event_id=event_id, responses={"approve": True}
        ),
        "retry_requested": RetryRequested(event_id=event_id, error="Oops", message="again"),
        "completed": Completed(event_id=event_id, result=42),
        "failed": Failed(event_id=event_id, error="Boom", message="no"),
        "cancelled": Cancelled(event_id=event_id),
        "watcher_added": WatcherAdded(event_id=event_id, principal=Owner("carol")),
    }
    return events[kind]


def request_authority(kind: str) -> Access:
    """The request authority entitled to send ``kind`` to ALICE's task."""
    return access(SYSTEM if kind == "watcher_added" else ALICE)


class TransitionContract(ContractBase):
    """transition(): revision guards and every event kind."""

    async def test_applied_event_bumps_revision_by_exactly_one(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """An applied event MUST raise the revision by exactly 1 and be recorded in history
        with ``committed_at`` from the store clock; the returned snapshot MUST equal what
        ``get`` reads afterwards.

        Troubleshooting: increment the revision in the same write that checks it
        (``SET revision = revision + 1 WHERE revision = :expected``), append the history
        row in the same transaction, and stamp ``committed_at`` with the store clock.
        """
        created = await store.create(new_task())
        clock.advance(3)
        grant = WatcherAdded(event_id="g1", principal=BOB)
        done = await store.transition(created.id, 0, grant, access(SYSTEM))
        assert "applied" == done.outcome
        assert 1 == done.snapshot.revision
        assert done.record is not None
        assert (1, clock.now(), "watcher_added") == (
            done.record.revision,
            done.record.committed_at,
            done.record.kind,
        )
        assert clock.now() == done.snapshot.updated_at
        assert [done.record] == await store.history(created.id, tenant="default")
        assert done.snapshot == await store.get(created.id, tenant="default")

    async def test_committed_at_strictly_increases_even_with_a_frozen_clock(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``committed_at`` MUST strictly increase along one task's history even when the
        store clock does not move, and never precede the clock.

        Troubleshooting: commit at ``max(now, previous updated_at + 1 ms)``
        (``rules.next_commit_time``); two events in the same millisecond would otherwise
        share an instant and ordering by time would be ambiguous.
        """
        created = await store.create(new_task())
        for revision, name in enumerate(["u1", "u2", "u3", "u4"]):
            grant = WatcherAdded(event_id=name, principal=Owner(name))
            await store.transition(created.id, revision, grant, access(SYSTEM))
        history = await store.history(created.id, tenant="default")
        instants = [record.committed_at for record in history]
        assert [1, 2, 3, 4] == [record.revision for record in history]
        assert sorted(set(instants)) == instants
        assert 4 == len(set(instants))
        assert clock.now() <= instants[0]

    async def test_stale_revision_raises_conflict(self, store: TaskStore) -> None:
        """A transition at a stale revision MUST raise ``RevisionConflict`` carrying the
        current snapshot, and record nothing.

        Troubleshooting: the revision check and the write are one atomic statement; load
        the current row (as ``get`` presents it) for ``.current`` after the failed write.
        """
        created = await store.create(new_task())
        first = await store.transition(
            created.id, 0, WatcherAdded(event_id="g1", principal=BOB), access(SYSTEM)
        )
        with pytest.raises(RevisionConflict) as caught:
            await store.transition(created.id, 0, Cancelled(event_id="c1"), access(ALICE))
        assert first.snapshot == caught.value.current
        assert [first.record] == await store.history(created.id, tenant="default")
        assert first.snapshot == await store.get(created.id, tenant="default")

    async def test_a_conflict_on_a_running_task_carries_it_as_read_now(
        self, store: TaskStore
    ) -> None:
        """A ``RevisionConflict`` on a task under a live lease MUST carry the task as
        ``get`` reads it now: ``running``, with its claim.

        Troubleshooting: build ``.current`` with ``rules.present(snapshot, now)`` at the
        store clock, as every read does.
        """
        created = await store.create(new_task())
        await store.claim(created.id, "w1", LEASE_S)
        with pytest.raises(RevisionConflict) as caught:
            await store.transition(created.id, 7, Cancelled(event_id="c1"), access(ALICE))
        assert TaskStatus.RUNNING == caught.value.current.status
        assert await store.get(created.id, tenant="default") == caught.value.current

    @pytest.mark.parametrize("kind", REQUEST_KINDS)
    @pytest.mark.parametrize("end", TERMINAL_ENDS)
    async def test_request_events_on_a_terminal_task_are_unchanged(
        self, store: TaskStore, end: str, kind: str
    ) -> None:
        """Every request event on a terminal task (completed, failed or cancelled) MUST
        answer ``unchanged`` and record nothing: same revision, same snapshot.

        Troubleshooting: a terminal task is final; ``rules.apply_event`` returns ``None``
        for it, and the store must then write nothing (not even ``updated_at``).
        """
        done = await finished_task(store, end=end)
        history = await store.history(done.id, tenant="default")
        outcome = await store.transition(
            done.id, done.revision, event_of(kind), request_authority(kind)
        )
        assert ("unchanged", None) == (outcome.outcome, outcome.record)
        assert done == outcome.snapshot
        assert done == await store.get(done.id, tenant="default")
        assert history == await store.history(done.id, tenant="default")

    @pytest.mark.parametrize("kind", LEASE_KINDS)
    async def test_worker_events_on_a_cancelled_task_are_unchanged(
        self, store: TaskStore, kind: str
    ) -> None:
        """Every worker event the lease holder sends after its task was cancelled MUST
        answer ``unchanged`` and record nothing (the cancel keeps the lease live so the
        holder can still be heard and learn of the cancel).

        Troubleshooting: a cancel must not end the lease; and a terminal task must ignore
        the holder's late completion instead of overwriting the cancel.
        """
        snapshot, lease = await created_and_claimed(store)
        cancelled = await store.transition(snapshot.id, 0, Cancelled(event_id="c"), access(ALICE))
        outcome = await store.transition(snapshot.id, 1, event_of(kind), lease)
        assert ("unchanged", None) == (outcome.outcome, outcome.record)
        stored = await store.get(snapshot.id, tenant="default")
        assert cancelled.snapshot == stored
        assert TaskStatus.CANCELLED == stored.status
        assert 1 == len(await store.history(snapshot.id, tenant="default"))

    async def test_cancel_by_owner_records_cancelled_by_user(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A cancel by the owner MUST make the task ``cancelled`` with ``cancel_reason``
        ``user``, error message "Cancelled by user" and ``finished_at`` at the commit.

        Troubleshooting: render the message from the reason table
        (``tasks_core.reasons``); never store a message passed by the caller.
        """
        created = await store.create(new_task())
        clock.advance(1)
        done = await store.transition(created.id, 0, Cancelled(event_id="c"), access(ALICE))
        stored = await store.get(created.id, tenant="default")
        assert TaskStatus.CANCELLED == stored.status
        assert CancelReason.USER == stored.cancel_reason
        assert stored.error is not None
        assert "Cancelled by user" == stored.error.message
        assert clock.now() == stored.finished_at
        assert done.record is not None
        assert (TaskStatus.CANCELLED, stored.error) == (done.record.status, done.record.error)

    async def test_completed_stores_the_result_and_failed_the_error(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``completed`` MUST store its result, ``failed`` its error (type and message),
        both setting ``finished_at``; a plain failure has no ``cancel_reason``.

        Troubleshooting: the terminal event alone sets ``result``/``error``; store them in
        the same write as the status.
        """
        ok_snapshot, ok_lease = await created_and_claimed(store)
        clock.advance(2)
        done = Completed(event_id="d", result=[1, "a"])
        await store.transition(ok_snapshot.id, 0, done, ok_lease)
        ok = await store.get(ok_snapshot.id, tenant="default")
        assert (TaskStatus.COMPLETED, [1, "a"], None) == (ok.status, ok.result, ok.error)
        assert clock.now() == ok.finished_at
        bad_snapshot, bad_lease = await created_and_claimed(store)
        failure = Failed(event_id="f", error="ValueError", message="bad value")
        await store.transition(bad_snapshot.id, 0, failure, bad_lease)
        bad = await store.get(bad_snapshot.id, tenant="default")
        assert TaskStatus.FAILED == bad.status
        assert ErrorInfo(type="ValueError", message="bad value") == bad.error
        assert bad.cancel_reason is None

    async def test_failed_with_reason_timeout_sets_cancel_reason_timeout(
        self, store: TaskStore
    ) -> None:
        """``failed`` with ``reason="timeout"`` MUST store ``cancel_reason`` ``timeout``.

        Troubleshooting: map ``Failed.reason`` onto ``cancel_reason`` in the same write as
        the failure (``rules.apply_event`` does it).
        """
        snapshot, lease = await created_and_claimed(store)
        timeout = Failed(
            event_id="t", error="TaskTimeout", message="Timeout of 5s exceeded", reason="timeout"
        )
        await store.transition(snapshot.id, 0, timeout, lease)
        stored = await store.get(snapshot.id, tenant="default")
        assert (TaskStatus.FAILED, CancelReason.TIMEOUT) == (stored.status, stored.cancel_reason)

    async def test_a_timeout_fails_the_task_even_with_retries_left(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``failed`` with ``reason="timeout"`` MUST end the task ``failed`` even when its
        retry policy has attempts left: no retry counted or scheduled, the lease ended,
        and ``claim_next`` never serves it again.

        Troubleshooting: ``failed`` is terminal whatever its reason; only a
        ``retry_requested`` event consults the retry policy (``rules.apply_event``). A
        run that overran its timeout must not start again behind the user's back.
        """
        snapshot, lease = await created_and_claimed(
            store, retry=RetryPolicy.fixed(5, attempts=3))
        timeout = Failed(event_id="t", error="TaskTimeout", message="Timeout of 5s exceeded",
                         reason="timeout")
        done = await store.transition(snapshot.id, 0, timeout, lease)
        stored = await store.get(snapshot.id, tenant="default")
        assert done.snapshot == stored
        assert (TaskStatus.FAILED, CancelReason.TIMEOUT, 0, None) == (
            stored.status, stored.cancel_reason, stored.retry_count, stored.retry_at)
        assert ErrorInfo(type="TaskTimeout", message="Timeout of 5s exceeded") == stored.error
        clock.advance(60)
        assert [] == await store.claim_next("w2", 30, queues=["default"])
        assert ["failed"] == [r.kind for r in await store.history(snapshot.id, tenant=None)]

    async def test_a_timeout_after_a_cancel_keeps_the_cancel(self, store: TaskStore) -> None:
        """A ``failed`` with ``reason="timeout"`` the lease holder sends after its task was
        cancelled MUST answer ``unchanged``: the task keeps status ``cancelled``,
        ``cancel_reason`` ``user`` and the "Cancelled by user" error.

        Troubleshooting: a terminal task is final for every event, whatever its reason;
        do not record the timeout's reason (or error) on a task that already ended.
        """
        snapshot, lease = await created_and_claimed(store)
        cancelled = await store.transition(snapshot.id, 0, Cancelled(event_id="c"),
                                           access(ALICE))
        timeout = Failed(event_id="t", error="TaskTimeout", message="Timeout of 5s exceeded",
                         reason="timeout")
        late = await store.transition(snapshot.id, 1, timeout, lease)
        assert ("unchanged", None) == (late.outcome, late.record)
        stored = await store.get(snapshot.id, tenant="default")
        assert cancelled.snapshot == stored
        assert stored.error is not None
        assert (TaskStatus.CANCELLED, CancelReason.USER, "Cancelled by user") == (
            stored.status, stored.cancel_reason, stored.error.message)

    @pytest.mark.parametrize("kind", REQUEST_KINDS)
    async def test_a_lease_never_authorizes_request_events(
        self, store: TaskStore, kind: str
    ) -> None:
        """A request event (cancel, answers, watcher grant) sent with a ``Lease`` MUST raise
        ``AuthorizationError`` and change nothing.

        Troubleshooting: decide by the authority's type first: a worker must never cancel
        or answer on a user's behalf.
        """
        snapshot, lease = await created_and_claimed(store)
        with pytest.raises(AuthorizationError):
            await store.transition(snapshot.id, 0, event_of(kind), lease)
        assert snapshot == await store.get(snapshot.id, tenant="default")

    @pytest.mark.parametrize("principal", [ALICE, SYSTEM], ids=["owner", "system"])
    @pytest.mark.parametrize("kind", LEASE_KINDS)
    async def test_request_access_never_authorizes_worker_events(
        self, store: TaskStore, kind: str, principal: Owner | System
    ) -> None:
        """A worker event sent with request ``Access`` MUST raise ``AuthorizationError``,
        even for the owner or System, and change nothing.

        Troubleshooting: worker events need the exact live lease; nobody may complete,
        fail, retry or ask for input on a worker's behalf.
        """
        snapshot, _ = await created_and_claimed(store)
        with pytest.raises(AuthorizationError):
            await store.transition(snapshot.id, 0, event_of(kind), access(principal))
        assert snapshot == await store.get(snapshot.id, tenant="default")

    async def test_only_system_adds_watchers(self, store: TaskStore) -> None:
        """``watcher_added`` MUST be refused (``AuthorizationError``) for the owner and MUST
        be applied for System, after which the watcher may cancel.

        Troubleshooting: watchers are granted by core at submit only; the right "grant"
        belongs to System alone (``rules.check_request``).
        """
        created = await store.create(new_task())
        grant = WatcherAdded(event_id="g", principal=BOB)
        with pytest.raises(AuthorizationError):
            await store.transition(created.id, 0, grant, access(ALICE))
        done = await store.transition(created.id, 0, grant, access(SYSTEM))
        assert (BOB,) == done.snapshot.watchers
        cancel = await store.transition(created.id, 1, Cancelled(event_id="c"), access(BOB))
        assert "applied" == cancel.outcome

    async def test_granting_an_existing_watcher_or_the_owner_is_unchanged(
        self, store: TaskStore
    ) -> None:
        """Granting a principal who already is a watcher, or the owner, MUST answer
        ``unchanged`` and record nothing.

        Troubleshooting: compare principals by user id and tenant before appending.
        """
        created = await store.create(new_task(watchers=(BOB,)))
        for event_id, principal in [("again", BOB), ("owner", ALICE)]:
            grant = WatcherAdded(event_id=event_id, principal=principal)
            outcome = await store.transition(created.id, 0, grant, access(SYSTEM))
            assert ("unchanged", (BOB,), 0) == (
                outcome.outcome,
                outcome.snapshot.watchers,
                outcome.snapshot.revision,
            )
        assert [] == await store.history(created.id, tenant="default")

    async def test_watcher_from_another_tenant_is_invalid_input(self, store: TaskStore) -> None:
        """Granting a watcher of another tenant MUST raise ``InvalidInput`` and change
        nothing.

        Troubleshooting: a task's principals all live in its tenant; ``rules.apply_event``
        refuses the grant before anything is written.
        """
        created = await store.create(new_task())
        grant = WatcherAdded(event_id="g", principal=MALLORY)
        with pytest.raises(InvalidInput):
            await store.transition(created.id, 0, grant, access(SYSTEM))
        assert created == await store.get(created.id, tenant="default")

    async def test_transition_of_an_unknown_task_raises_task_not_found(
        self, store: TaskStore
    ) -> None:
        """A transition naming an unknown task MUST raise ``TaskNotFound`` for request
        access and never create anything.

        Troubleshooting: a transition is an update; it must not upsert a row.
        """
        with pytest.raises(TaskNotFound):
            await store.transition("nope", 0, Cancelled(event_id="c"), access(SYSTEM))
        with pytest.raises(TaskNotFound):
            await store.get("nope", tenant=None)
