"""report_progress(): written by the lease holder, lease-checked, not revisioned."""

from __future__ import annotations

import math

import pytest
from tasks_core import (
    Cancelled,
    InvalidInput,
    LeaseLost,
    ManualClock,
    Progress,
    TaskStatus,
    TaskStore,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import ALICE, LEASE_S, access, claim, created_and_claimed


class ProgressContract(ContractBase):
    """report_progress(): written by the lease holder, lease-checked, not revisioned."""

    async def test_lease_holder_records_progress_without_a_new_revision(
        self, store: TaskStore
    ) -> None:
        """``report_progress`` by the lease holder MUST store value and message, visible to
        readers, without changing the revision or adding history.

        Troubleshooting: progress is a plain field update under the lease check; do not
        route it through ``transition``.
        """
        snapshot, lease = await created_and_claimed(store)
        returned = await store.report_progress(lease, 42.5, "halfway")
        stored = await store.get(snapshot.id, tenant=None)
        assert Progress(value=42.5, message="halfway") == returned.progress == stored.progress
        assert (0, TaskStatus.RUNNING) == (stored.revision, stored.status)
        assert [] == await store.history(snapshot.id, tenant=None)

    async def test_later_progress_replaces_earlier_progress(self, store: TaskStore) -> None:
        """Each report MUST replace the previous one, including the bounds 0 and 100 and a
        missing message.

        Troubleshooting: overwrite both value and message; ``None`` clears the message.
        """
        snapshot, lease = await created_and_claimed(store)
        seen = []
        for value, message in ((0, "start"), (100, None)):
            await store.report_progress(lease, value, message)
            seen.append((await store.get(snapshot.id, tenant=None)).progress)
        assert [Progress(value=0, message="start"), Progress(value=100)] == seen

    @pytest.mark.parametrize("value", [-0.1, 100.1, math.nan, math.inf, -math.inf])
    async def test_progress_outside_0_to_100_is_invalid(
        self, store: TaskStore, value: float
    ) -> None:
        """``report_progress`` with a value outside 0..100 (or not finite) MUST raise
        ``InvalidInput`` and keep the previous progress.

        Troubleshooting: build ``Progress(value=…, message=…)`` before writing; it validates
        the range.
        """
        snapshot, lease = await created_and_claimed(store)
        await store.report_progress(lease, 10, "ok")
        with pytest.raises(InvalidInput):
            await store.report_progress(lease, value, "bad")
        stored = await store.get(snapshot.id, tenant=None)
        assert Progress(value=10, message="ok") == stored.progress

    async def test_progress_with_a_stale_lease_is_refused(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """``report_progress`` with the lease of an earlier claim MUST raise ``LeaseLost``
        and leave the new holder's progress alone.

        Troubleshooting: check token, generation and worker against the stored lease in
        the same atomic step as the write.
        """
        snapshot, old = await created_and_claimed(store)
        clock.advance(LEASE_S)
        _, new = await claim(store, snapshot.id, worker="w2")
        await store.report_progress(new, 5, "new holder")
        with pytest.raises(LeaseLost):
            await store.report_progress(old, 99, "old holder")
        assert Progress(value=5, message="new holder") == (
            await store.get(snapshot.id, tenant=None)
        ).progress

    async def test_progress_on_a_cancelled_task_changes_nothing(self, store: TaskStore) -> None:
        """After a cancel, ``report_progress`` by the (still live) lease holder MUST change
        nothing and return the snapshot with status ``cancelled``, so the worker learns it
        should stop.

        Troubleshooting: a terminal task is final; skip the write but still return the
        current snapshot (``rules.report_progress``).
        """
        snapshot, lease = await created_and_claimed(store, owner=ALICE)
        await store.report_progress(lease, 20, "before")
        await store.transition(snapshot.id, 0, Cancelled(event_id="stop"), access(ALICE))
        returned = await store.report_progress(lease, 90, "after")
        stored = await store.get(snapshot.id, tenant=None)
        assert TaskStatus.CANCELLED == returned.status == stored.status
        assert Progress(value=20, message="before") == returned.progress == stored.progress
        assert 1 == stored.revision
