"""A ``MemoryStore`` with a toy ``transactional_submit`` (creates made in a transaction are
applied at its commit), and broken variants of it, each breaking one rule of
``TransactionContract``. ``test_self.py`` runs the suite's transaction tests against each.

The toy decides nothing at create time (no refusals, no capacity): it stands for a store
whose database holds the writes until the application commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from tasks_core import InvalidInput, NewTask, Snapshot, rules
from tasks_store_memory import MemoryStore

__all__ = ["TransactionIgnored", "TransactionNotChecked", "TransactionalMemoryStore"]


class ToyTransaction:
    """The application's transaction: the creates it holds until ``commit``."""

    def __init__(self, store: TransactionalMemoryStore, started: bool) -> None:
        self.handle = self
        self.store = store
        self.started = started
        self.held: list[NewTask] = []

    async def commit(self) -> None:
        held, self.held, self.started = self.held, [], False
        for new in held:
            await MemoryStore.create(self.store, new)

    async def rollback(self) -> None:
        self.held, self.started = [], False


class TransactionalMemoryStore(MemoryStore):
    """``create``/``create_many`` with ``transaction=``: held by the transaction."""

    CAPABILITIES = MemoryStore.CAPABILITIES.model_copy(update={"transactional_submit": True})

    @staticmethod
    async def begin_transaction(store: Any, started: bool) -> ToyTransaction:
        return ToyTransaction(store, started)

    def _transaction(self, transaction: object) -> ToyTransaction:
        if not isinstance(transaction, ToyTransaction) or not transaction.started:
            raise InvalidInput("transaction must be a ToyTransaction that has begun")
        return transaction

    def _held(self, transaction: ToyTransaction, new: NewTask) -> Snapshot:
        transaction.held.append(new)
        return rules.new_snapshot(new, rules.tick(datetime.now(UTC)))

    async def create(
        self, new: NewTask, *, replace: Snapshot | None = None, transaction: Any = None
    ) -> Snapshot:
        if transaction is None:
            return await super().create(new, replace=replace)
        return self._held(self._transaction(transaction), new)

    async def create_many(
        self, news: Sequence[NewTask], *, transaction: Any = None
    ) -> list[Snapshot]:
        if transaction is None:
            return await super().create_many(news)
        held = self._transaction(transaction)
        return [self._held(held, new) for new in news]


class TransactionIgnored(TransactionalMemoryStore):
    """Writes a task created in a transaction at once, as if there were none."""

    async def create(
        self, new: NewTask, *, replace: Snapshot | None = None, transaction: Any = None
    ) -> Snapshot:
        if transaction is not None:
            self._transaction(transaction)
        return await super().create(new, replace=replace)

    async def create_many(
        self, news: Sequence[NewTask], *, transaction: Any = None
    ) -> list[Snapshot]:
        if transaction is not None:
            self._transaction(transaction)
        return await super().create_many(news)


class TransactionNotChecked(TransactionalMemoryStore):
    """Takes a handle on which no transaction was begun (and holds its creates anyway)."""

    def _transaction(self, transaction: object) -> ToyTransaction:
        assert isinstance(transaction, ToyTransaction)
        return transaction
