"""``create_many`` of ``MemoryStore`` (capability ``batch_create``): a batch of new tasks
stored under one hold of the store lock, all or nothing, as ``storekit.check_batch_room``
decides.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from tasks_core import storekit
from tasks_core.errors import CapabilityNotSupported
from tasks_core.models import NewTask, Snapshot, StoreCapabilities

from tasks_store_memory._counts import Counts
from tasks_store_memory._wakeups import Wakeups

__all__ = ["Creates"]


class Creates(Counts):
    """``create_many`` on the records (the store lock held throughout)."""

    _wakeups: Wakeups

    @property
    def capabilities(self) -> StoreCapabilities:
        """The store's capabilities (``MemoryStore`` declares them)."""
        raise NotImplementedError

    async def create_many(
        self, news: Sequence[NewTask], *, transaction: Any = None
    ) -> builtins.list[Snapshot]:
        """Store every task of ``news`` at one instant, or none (see
        ``TaskStore.create_many``).

        Raises:
            CapabilityNotSupported: ``transaction`` given (no application transactions), or
                the capability is off.
            InvalidInput, TaskExists, CapacityExceeded: nothing stored.
            StoreCorrupt: a stored record holding one of the ids fails validation.
        """
        if not self.capabilities.batch_create:
            raise CapabilityNotSupported("This store has no batch creates "
                                         "(capability 'batch_create' is off)")
        if transaction is not None:
            raise CapabilityNotSupported("The memory store has no transactions to join "
                                         "(capability 'transactional_submit' is off)")
        batch = storekit.check_create_many(news)
        with self._locked() as now:
            taken = {new.id: self._take(new.id, row) for new in batch
                     if (row := self._rows.get(new.id)) is not None}
            storekit.check_batch_room(
                batch, taken=taken, stored=len(self._rows), limits=self.limits, now=now,
                active=lambda tenant: self._active_tasks(tenant, now),
            )
            snapshots = storekit.new_snapshots(batch, now)
            for snapshot in snapshots:
                self._add(snapshot)
            for queue in dict.fromkeys(snapshot.queue for snapshot in snapshots):
                self._wakeups.notify(queue)
            return snapshots
