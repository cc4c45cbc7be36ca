"""Transitions: ``transition`` and ``transition_many`` (group commit), on the SQL path.

``transition`` is ``transition_many`` of one item. The rows the items name are locked in
id order (SQLite's ``BEGIN IMMEDIATE`` already serializes writers), so concurrent batches
cannot deadlock; the clock is read after the locks; the items' event ids are looked up in
the history; :func:`tasks_core.storekit.plan_transitions` decides; each changed row is
written once, guarded by the ``row_version`` read under its lock, with the records,
watchers, wakeups and cancel notices — one transaction.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core import rules
from tasks_core.authority import Access
from tasks_core.errors import InvalidInput, TasksError
from tasks_core.events import Event, Transition
from tasks_core.models import Lease
from tasks_core.storekit import TransitionPlan, plan_transitions

from tasks_store_sql import _codec
from tasks_store_sql._batch import Loaded, changed_rows, history_rows, watcher_rows
from tasks_store_sql._claims import ClaimOps

__all__ = ["TransitionOps"]


class TransitionOps(ClaimOps):
    """Transition operations (see the module docstring)."""

    async def transition(
        self,
        task_id: str,
        expected_revision: int,
        event: Event,
        authority: Lease | Access,
    ) -> Transition:
        """Apply ``event`` atomically (see ``TaskStore.transition``).

        Raises:
            TaskNotFound: unknown; for request access also another tenant, invisible or
                expired.
            LeaseLost: the lease is not the exact live lease.
            AuthorizationError: wrong kind of authority, or a missing right.
            EventIdReused: this event id was applied with different content.
            RevisionConflict: ``expected_revision`` is not current.
            InvalidInput: the event is not valid for this task.
            StoreCorrupt, StoreUnavailable: as for :meth:`get`.
        """
        if not isinstance(task_id, str):
            raise InvalidInput("task_id must be a string")
        if not isinstance(authority, (Lease, Access)):
            raise TypeError("authority must be a Lease or an Access")
        [result] = await self.transition_many([(task_id, expected_revision, event, authority)])
        if isinstance(result, TasksError):
            raise result
        return result

    async def transition_many(
        self, items: Sequence[rules.BatchItem]
    ) -> builtins.list[Transition | TasksError]:
        """Apply several transitions in one transaction — group commit (see
        ``TaskStore.transition_many``). The rows of every task named are locked in id
        order (so concurrent batches cannot deadlock), the clock is read after the locks,
        each item is decided as :meth:`transition` decides it (the store kit), and every
        changed row is written once, guarded by the ``row_version`` read under its lock.

        Returns:
            One ``Transition`` or refusal per item, in order.

        Raises:
            TypeError: a malformed item.
            InvalidInput: more than 1000 items.
            StoreUnavailable: transient failure; nothing written.
        """
        checked = rules.check_batch(items)
        if not checked:
            return []
        await self._ensure_ready()
        return await self._transition_checked(checked)

    async def _transition_checked(
        self, checked: builtins.list[rules.BatchItem]
    ) -> builtins.list[Transition | TasksError]:
        """``transition_many`` of checked, non-empty items (PostgreSQL overrides)."""

        async def op(conn: AsyncConnection) -> builtins.list[Transition | TasksError]:
            loaded = await self._lock_rows(conn, sorted({item[0] for item in checked}))
            now = await self._now(conn)
            await self._find_events(conn, loaded, sorted({item[2].event_id for item in checked}))
            plan = plan_transitions(checked, loaded, now)
            await self._write_plan(conn, plan, loaded)
            return plan.results

        return await self._db.run(op, write=True)

    async def _lock_rows(
        self, conn: AsyncConnection, ids: builtins.list[str]
    ) -> dict[str, Loaded]:
        """Lock the rows of ``ids`` in id order (SQLite: the write lock is held already)."""
        found = await conn.execute(self._statements.lock_rows, {"b_ids": ids})
        return {row.id: row for row in map(self._loaded, found)}

    def _loaded(self, found: Sequence[Any]) -> Loaded:
        """A row read as ``lock_rows`` reads it, with the snapshot kept for what it
        stores, if any."""
        row = Loaded.of(found)
        row._snapshot = self.decoded.take(row.id, row.stored)
        return row

    async def _find_events(
        self, conn: AsyncConnection, loaded: dict[str, Loaded], event_ids: builtins.list[str]
    ) -> None:
        """Attach the history entries of ``event_ids`` to the locked rows."""
        if not loaded:
            return
        found = await conn.execute(
            self._statements.find_events, {"b_ids": list(loaded), "b_event_ids": event_ids}
        )
        for task_id, event_id, record in found:
            loaded[task_id].events[event_id] = record

    async def _write_plan(
        self, conn: AsyncConnection, plan: TransitionPlan, loaded: dict[str, Loaded]
    ) -> None:
        """Write what the kit planned: each changed row once, then the events,
        watchers, wakeups and cancel notices.

        Raises:
            StoreUnavailable: a row changed under its lock; nothing is committed.
        """
        t = self.tables
        await self._save_rows(
            conn, [(r.id, r.row_version, r.snapshot, r.token, r.final_event)
                   for r in changed_rows(loaded)]
        )
        recorded = history_rows(plan.events, loaded)
        if recorded:
            await conn.execute(
                sa.insert(t.events), [_codec.event_row(i, r) for i, r in recorded]
            )
        if plan.watchers:
            await conn.execute(sa.insert(t.members), watcher_rows(plan.watchers))
        for queue in sorted(plan.wake):
            await self._notify(conn, queue)
        if plan.cancelled:
            await self._notify_cancels(conn, sorted(plan.cancelled))
