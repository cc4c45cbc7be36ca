"""Event ids: duplicate replays and reused ids."""

from __future__ import annotations

import pytest
from tasks_core import (
    Cancelled,
    Completed,
    EventIdReused,
    LeaseLost,
    ManualClock,
    Owner,
    TaskStore,
    WatcherAdded,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    ALICE,
    BOB,
    SYSTEM,
    access,
    claim,
    created_and_claimed,
    new_task,
)


class ReplayContract(ContractBase):
    """Event ids: duplicate replays and reused ids."""

    async def test_duplicate_event_returns_original_outcome(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """Re-sending an applied event (same id, same content) MUST answer ``duplicate``
        with the original record (revision, ``committed_at``, effects) and the current
        snapshot, MUST NOT bump the revision, even after later events and at any expected
        revision, and MUST record nothing.

        Troubleshooting: look the event id up in the task's history *before* checking the
        revision (docs/design.md, State machine); a client retrying after a lost reply sends its old
        expected revision.
        """
        created = await store.create(new_task())
        grant = WatcherAdded(event_id="grant-bob", principal=BOB)
        first = await store.transition(created.id, 0, grant, access(SYSTEM))
        clock.advance(4)
        later = WatcherAdded(event_id="grant-carol", principal=Owner("carol"))
        second = await store.transition(created.id, 1, later, access(SYSTEM))
        clock.advance(4)
        again = await store.transition(created.id, 0, grant, access(SYSTEM))
        assert "duplicate" == again.outcome
        assert first.record == again.record
        assert second.snapshot == again.snapshot
        assert 2 == (await store.get(created.id, tenant="default")).revision
        history = await store.history(created.id, tenant="default")
        assert [first.record, second.record] == history

    async def test_reused_event_id_with_other_content_is_refused(self, store: TaskStore) -> None:
        """An event id already applied to the task MUST raise ``EventIdReused`` when sent
        with different content (another payload or another kind), changing nothing.

        Troubleshooting: compare the full event content (kind and every field but the
        id), e.g. via ``rules.check_replay``; do not treat the id alone as a duplicate.
        """
        created = await store.create(new_task())
        grant = WatcherAdded(event_id="e1", principal=BOB)
        first = await store.transition(created.id, 0, grant, access(SYSTEM))
        other_payload = WatcherAdded(event_id="e1", principal=Owner("carol"))
        with pytest.raises(EventIdReused):
            await store.transition(created.id, 1, other_payload, access(SYSTEM))
        with pytest.raises(EventIdReused):
            await store.transition(created.id, 1, Cancelled(event_id="e1"), access(SYSTEM))
        assert first.snapshot == await store.get(created.id, tenant="default")
        assert [first.record] == await store.history(created.id, tenant="default")

    async def test_event_ids_are_scoped_to_one_task(self, store: TaskStore) -> None:
        """The same event id on a *different* task MUST be independent: applied there, not
        a duplicate and not ``EventIdReused``.

        Troubleshooting: key the event-id index on (task id, event id), never on the event
        id alone.
        """
        first = await store.create(new_task())
        second = await store.create(new_task())
        cancel = Cancelled(event_id="same-id")
        assert "applied" == (await store.transition(first.id, 0, cancel, access(ALICE))).outcome
        grant = WatcherAdded(event_id="same-id", principal=BOB)
        other = await store.transition(second.id, 0, grant, access(SYSTEM))
        assert ("applied", 1) == (other.outcome, other.snapshot.revision)

    async def test_lease_holder_hears_duplicate_after_its_lease_ended(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """The lease holder retrying its completion after the lease ended (the completion
        ended it, and its expiry has passed) MUST hear ``duplicate`` with the original
        record; changing the content MUST still raise ``EventIdReused``.

        Troubleshooting: for a replayed event id check the exact lease but not its expiry
        (``authorize_event(replayed=True)``); otherwise a worker whose reply was lost sees
        ``LeaseLost`` and believes its result was dropped.
        """
        snapshot, lease = await created_and_claimed(store)
        done = await store.transition(snapshot.id, 0, Completed(event_id="done", result=1), lease)
        clock.advance(3600)  # far past the lease's own expiry
        again = await store.transition(snapshot.id, 0, Completed(event_id="done", result=1), lease)
        assert ("duplicate", done.record) == (again.outcome, again.record)
        with pytest.raises(EventIdReused):
            await store.transition(snapshot.id, 1, Completed(event_id="done", result=2), lease)

    async def test_only_the_exact_lease_hears_duplicate(self, store: TaskStore) -> None:
        """A replay sent with an older lease of the task MUST raise ``LeaseLost``, even when
        the event id was applied (by the newer lease).

        Troubleshooting: the replay check comes after authorization; a stale lease must
        not learn anything about the current run.
        """
        snapshot, first_lease = await created_and_claimed(store)
        await store.release(first_lease)
        _, second_lease = await claim(store, snapshot.id, "w2")
        await store.transition(snapshot.id, 0, Completed(event_id="done"), second_lease)
        with pytest.raises(LeaseLost):
            await store.transition(snapshot.id, 0, Completed(event_id="done"), first_lease)

    async def test_replayed_cancel_after_finish_is_duplicate_not_unchanged(
        self, store: TaskStore
    ) -> None:
        """A retried cancel on the task it cancelled MUST answer ``duplicate`` with the
        original record, not ``unchanged`` (replay comes before apply).

        Troubleshooting: run the replay check before the "terminal tasks ignore events"
        rule; the caller needs to know its own cancel took effect.
        """
        created = await store.create(new_task())
        cancel = Cancelled(event_id="cancel-1")
        first = await store.transition(created.id, 0, cancel, access(ALICE))
        again = await store.transition(created.id, 0, cancel, access(ALICE))
        assert ("duplicate", first.record) == (again.outcome, again.record)
