"""``counts`` of ``MemoryStore`` (capability ``counts``): the tasks of a tenant by queue
and status, read under one hold of the store lock.

Every stored task is looked at once: the memory store keeps no index by status, and a
count here costs what one ``list`` over every task would. Expired tasks are left out and
the derived statuses are read as ``rules.present`` reads them; a record that fails
validation is left out, as ``list`` leaves it out.
"""

from __future__ import annotations

import builtins
from collections import Counter

from tasks_core import rules
from tasks_core.errors import CapabilityNotSupported, StoreCorrupt
from tasks_core.models import StoreCapabilities, TaskStatus

from tasks_store_memory._records import Records

__all__ = ["Counts"]


class Counts(Records):
    """``counts`` on the records (the store lock held throughout)."""

    @property
    def capabilities(self) -> StoreCapabilities:
        """The store's capabilities (``MemoryStore`` declares them)."""
        raise NotImplementedError

    async def counts(
        self, *, tenant: str | None
    ) -> builtins.dict[tuple[str, TaskStatus], int]:
        """How many tasks of ``tenant`` read each status in each queue (see
        ``TaskStore.counts``).

        Raises:
            CapabilityNotSupported: the capability is off.
            InvalidInput: ``tenant`` is neither a string nor ``None``.
        """
        if not self.capabilities.counts:
            raise CapabilityNotSupported("this store does not count tasks (capability 'counts')")
        rules.check_tenant(tenant)
        tally: Counter[tuple[str, TaskStatus]] = Counter()
        with self._locked() as now:
            for task_id, row in self._rows.items():
                try:
                    snapshot = self._view(task_id, row)
                except StoreCorrupt:
                    continue
                if not self._tenant_matches(snapshot, tenant) or self._expired(snapshot, now):
                    continue
                tally[(snapshot.queue, rules.present(snapshot, now).status)] += 1
        return dict(tally)
