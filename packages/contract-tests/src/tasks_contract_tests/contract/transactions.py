"""``create(…, transaction=…)``: a task created inside the application's own transaction
is stored only if that transaction commits (capability ``transactional_submit``).

A transaction of the store's kind comes from the ``begin_transaction`` fixture (a plugin's
``StoreSpec.begin_transaction`` in the URL suite). Skipped when the capability is off
(``CapabilityContract`` then proves that the call raises ``CapabilityNotSupported``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from tasks_core import (
    App,
    InvalidInput,
    Owner,
    SubmitItem,
    TaskContext,
    TaskNotFound,
    TaskStore,
    Unavailable,
)
from tasks_core.plugins import ApplicationTransaction, BeginTransaction

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import LEASE_S, new_task

Begin = Callable[..., Awaitable[ApplicationTransaction]]


async def _absent(store: TaskStore, task_id: str) -> bool:
    """Whether the store reads no task ``task_id``."""
    try:
        await store.get(task_id, tenant=None)
    except TaskNotFound:
        return True
    return False


async def _claimed(store: TaskStore) -> list[str]:
    return [c.snapshot.id for c in await store.claim_next("w1", LEASE_S, queues=["default"],
                                                          limit=10)]


class TransactionContract(ContractBase):
    """Tasks created inside the application's transaction."""

    @pytest.fixture
    async def begin(
        self, store: TaskStore, begin_transaction: BeginTransaction | None
    ) -> AsyncIterator[Begin]:
        """``await begin(started=True)``: an application transaction on ``store`` (rolled
        back after the test unless it ended)."""
        if not store.capabilities.transactional_submit:
            pytest.skip("store capability 'transactional_submit' is off")
        if begin_transaction is None:
            pytest.fail("Override the `begin_transaction` fixture in your StoreContract "
                        "subclass (or declare StoreSpec.begin_transaction): the store says "
                        "it has transactional_submit")
        opened: list[ApplicationTransaction] = []

        async def make(started: bool = True) -> ApplicationTransaction:
            transaction = await begin_transaction(store, started)
            opened.append(transaction)
            return transaction

        yield make
        for transaction in opened:
            await transaction.rollback()

    async def test_a_task_created_in_a_transaction_is_stored_when_it_commits(
        self, store: TaskStore, begin: Begin
    ) -> None:
        """A task created with ``transaction=`` MUST be invisible outside that transaction
        until it commits, then stored and claimable like any other.

        Troubleshooting: run the create's writes on the application's connection or
        session, without beginning or committing anything of your own.
        """
        transaction = await begin()
        created = await store.create(new_task(), transaction=transaction.handle)
        assert await _absent(store, created.id), "visible before the application committed"
        await transaction.commit()
        assert created.id == (await store.get(created.id, tenant=None)).id
        assert [created.id] == await _claimed(store)

    async def test_a_task_created_in_a_rolled_back_transaction_is_never_stored(
        self, store: TaskStore, begin: Begin
    ) -> None:
        """A task created with ``transaction=`` MUST vanish when that transaction rolls
        back: not readable, not claimable, its id free again.

        Troubleshooting: a create that commits on a connection of its own survives the
        application's rollback — use the connection given.
        """
        transaction = await begin()
        created = await store.create(new_task(), transaction=transaction.handle)
        await transaction.rollback()
        assert await _absent(store, created.id), "stored although the application rolled back"
        assert [] == await _claimed(store)
        assert created.id == (await store.create(new_task(created.id))).id

    async def test_a_batch_created_in_a_rolled_back_transaction_is_never_stored(
        self, store: TaskStore, begin: Begin
    ) -> None:
        """``create_many(…, transaction=…)`` MUST write the batch in the application's
        transaction too: a rollback leaves none of it (``batch_create`` stores).

        Troubleshooting: as for ``create``.
        """
        if not store.capabilities.batch_create:
            pytest.skip("store capability 'batch_create' is off")
        transaction = await begin()
        created = await store.create_many([new_task(), new_task()],
                                          transaction=transaction.handle)
        await transaction.rollback()
        assert [True, True] == [await _absent(store, s.id) for s in created]

    async def test_a_handle_with_no_transaction_begun_is_refused(
        self, store: TaskStore, begin: Begin
    ) -> None:
        """A handle of the right kind on which no transaction was begun MUST be refused
        with ``InvalidInput`` before anything is written: the caller's writes would not be
        atomic with the task's, and a driver's implicit transaction could drop it.

        Troubleshooting: check that the connection or session is inside a transaction
        before the first statement.
        """
        transaction = await begin(started=False)
        task = new_task()
        with pytest.raises(InvalidInput):
            await store.create(task, transaction=transaction.handle)
        await transaction.rollback()
        assert await _absent(store, task.id), "stored although the create was refused"

    async def test_a_join_granting_watchers_inside_a_transaction_is_refused_at_once(
        self, store: TaskStore, begin: Begin
    ) -> None:
        """A keyed ``submit`` (or ``submit_many`` item) with ``transaction=`` that would
        join a live run and grant it watchers MUST be refused at once with
        ``Unavailable`` (a runtime rule: the grant is a write of the store's own, which
        would wait for locks the application's transaction holds), nothing granted and the
        batch's new tasks not written; a join that grants nothing MUST still join.

        Troubleshooting: a hang here is a grant written inside the transaction's locks —
        the runtime refuses before any write, so a store should never see that grant.
        """
        app = App(store=store)

        @app.task
        async def ship(ctx: TaskContext, order: int) -> int:
            return order

        alice, carol = Owner("alice"), Owner("carol")
        live = await app.submit(ship, {"order": 1}, alice, key="live", delay=600)
        transaction = await begin()
        async with asyncio.timeout(30):
            with pytest.raises(Unavailable, match="outside the transaction"):
                await app.submit(ship, {"order": 1}, alice, key="live", watchers=[carol],
                                 transaction=transaction.handle)
            with pytest.raises(Unavailable, match=r"item 1: .*outside the transaction"):
                await app.submit_many(
                    [SubmitItem(ship, {"order": 2}, key="new"),
                     SubmitItem(ship, {"order": 1}, key="live", watchers=[carol])],
                    alice, transaction=transaction.handle)
            joined = await app.submit(ship, {"order": 1}, alice, key="live",
                                      transaction=transaction.handle)
            await transaction.commit()
        assert ("joined", live.id) == (joined.outcome, joined.id)
        assert () == (await app.get(live.id, alice)).watchers
        with pytest.raises(TaskNotFound):
            await app.get("alice::new", alice)

    async def test_a_batch_joining_its_own_new_task_with_watchers_writes_nothing(
        self, store: TaskStore, begin: Begin
    ) -> None:
        """A ``submit_many`` with ``transaction=`` whose later item gives an earlier item's
        key again with watchers that earlier item does not name MUST be refused with
        ``Unavailable`` naming both items, before anything is written: the transaction,
        committed after the refusal, MUST hold none of the batch's tasks. The same key again
        without new watchers MUST still join.

        Troubleshooting: tasks of the batch found after the commit mean the join of the
        batch's own task was decided after its creates were written.
        """
        app = App(store=store)

        @app.task
        async def ship(ctx: TaskContext, order: int) -> int:
            return order

        alice, carol = Owner("alice"), Owner("carol")
        transaction = await begin()
        async with asyncio.timeout(30):
            with pytest.raises(Unavailable, match=r"item 1: .*item 0.*outside the transaction"):
                await app.submit_many(
                    [SubmitItem(ship, {"order": 1}, key="w1"),
                     SubmitItem(ship, {"order": 1}, key="w1", watchers=[carol]),
                     SubmitItem(ship, {"order": 2}, key="w2")],
                    alice, transaction=transaction.handle)
            joined = await app.submit_many(
                [SubmitItem(ship, {"order": 3}, key="w3", watchers=[carol]),
                 SubmitItem(ship, {"order": 3}, key="w3", watchers=[carol])],
                alice, transaction=transaction.handle)
            await transaction.commit()
        assert ["created", "joined"] == [done.outcome for done in joined]
        for key in ("w1", "w2"):
            with pytest.raises(TaskNotFound):
                await app.get(f"alice::{key}", alice)
