"""delete(): terminal tasks only."""

from __future__ import annotations

import pytest
from tasks_core import (
    Cancelled,
    InputRequested,
    RevisionConflict,
    TaskNotFound,
    TaskQuery,
    TaskStatus,
    TaskStore,
    Unavailable,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    LEASE_S,
    SYSTEM,
    access,
    created_and_claimed,
    finished_task,
    new_task,
)


class DeleteContract(ContractBase):
    """delete(): terminal tasks only."""

    @pytest.mark.parametrize("end", ["completed", "failed", "cancelled"])
    async def test_delete_removes_a_terminal_task_and_frees_its_id(
        self, store: TaskStore, end: str
    ) -> None:
        """``delete`` of a terminal task at its current revision MUST remove it with its
        history: ``get`` and ``history`` raise ``TaskNotFound`` and the id can be created
        again from revision 0 with an empty history.

        Troubleshooting: delete the task row and its history/inbox rows in one
        transaction; leftover event ids would answer ``duplicate`` for the new task.
        """
        done = await finished_task(store, end=end)
        await store.delete(done.id, expected_revision=done.revision)
        with pytest.raises(TaskNotFound):
            await store.get(done.id, tenant=None)
        with pytest.raises(TaskNotFound):
            await store.history(done.id, tenant=None)
        assert [] == await store.list(TaskQuery(tenant=None))
        fresh = await store.create(new_task(done.id))
        assert 0 == fresh.revision
        again = await store.transition(done.id, 0, Cancelled(event_id="finish"), access(SYSTEM))
        assert ("applied", 1) == (again.outcome, again.snapshot.revision)

    async def test_a_deleted_task_holds_no_queue(self, store: TaskStore) -> None:
        """A task cancelled under a live lease and then deleted MUST no longer keep its
        exclusive queue busy: the next task of the queue is served at once.

        Troubleshooting: delete the task's row itself (and its lease with it); an index or
        counter of live leases kept beside the rows must lose the task in the same step.
        """
        if not store.capabilities.exclusive_queues:
            pytest.skip("store capability 'exclusive_queues' is off")
        cancelled = await finished_task(store, end="cancelled", queue="serial")
        await store.delete(cancelled.id, expected_revision=cancelled.revision)
        waiting = await store.create(new_task(queue="serial"))
        got = await store.claim_next("w1", LEASE_S, queues=["serial"], exclusive=["serial"])
        assert [waiting.id] == [c.snapshot.id for c in got]

    async def test_delete_of_a_live_task_raises_unavailable(self, store: TaskStore) -> None:
        """``delete`` of a pending, running or waiting task MUST raise ``Unavailable`` and
        remove nothing.

        Troubleshooting: delete is the admin's way to free a *finished* key; a live task
        may be executing and must be cancelled first.
        """
        pending = await store.create(new_task())
        running, _ = await created_and_claimed(store)
        waiting, lease = await created_and_claimed(store)
        asked = await store.transition(waiting.id, 0, InputRequested(event_id="q", key="k"), lease)
        for snapshot in [pending, running, asked.snapshot]:
            with pytest.raises(Unavailable):
                await store.delete(snapshot.id, expected_revision=snapshot.revision)
            assert snapshot == await store.get(snapshot.id, tenant="default")

    async def test_delete_at_a_stale_revision_raises_revision_conflict(
        self, store: TaskStore
    ) -> None:
        """``delete`` at a revision that is not current MUST raise ``RevisionConflict``
        carrying the current snapshot, and remove nothing.

        Troubleshooting: condition the delete on the revision
        (``DELETE … WHERE id = :id AND revision = :expected``) and report the current row.
        """
        created = await store.create(new_task())
        done = await store.transition(created.id, 0, Cancelled(event_id="c"), access(SYSTEM))
        with pytest.raises(RevisionConflict) as caught:
            await store.delete(created.id, expected_revision=0)
        assert done.snapshot == caught.value.current
        assert done.snapshot == await store.get(created.id, tenant="default")

    async def test_delete_of_a_running_task_at_a_stale_revision_carries_it_as_read(
        self, store: TaskStore
    ) -> None:
        """``delete`` at a stale revision of a task under a live lease MUST raise
        ``RevisionConflict`` carrying the task as ``get`` reads it (``running``), and
        remove nothing.

        Troubleshooting: present ``.current`` at the store clock, as every read does.
        """
        created = await store.create(new_task())
        await store.claim(created.id, "w1", LEASE_S)
        with pytest.raises(RevisionConflict) as caught:
            await store.delete(created.id, expected_revision=3)
        assert TaskStatus.RUNNING == caught.value.current.status
        assert await store.get(created.id, tenant="default") == caught.value.current

    async def test_delete_of_an_unknown_task_raises_task_not_found(
        self, store: TaskStore
    ) -> None:
        """``delete`` of an id that does not exist (or was already deleted) MUST raise
        ``TaskNotFound``.

        Troubleshooting: check the affected row count; a delete that matched nothing is a
        miss, not a success.
        """
        with pytest.raises(TaskNotFound):
            await store.delete("never-created", expected_revision=0)
        done = await finished_task(store)
        await store.delete(done.id, expected_revision=done.revision)
        with pytest.raises(TaskNotFound):
            await store.delete(done.id, expected_revision=done.revision)
