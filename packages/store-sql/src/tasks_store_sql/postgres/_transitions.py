"""PostgreSQL's ``transition_many`` on asyncpg: the ``completed`` events of runs this
store claimed by one statement (:mod:`._complete_sql`), every other item — and every
completion the statement did not write — by one transaction on the driver, decided by
:func:`tasks_core.storekit.plan_transitions` (the rows locked in id order, the clock read
after the locks, each changed row written once, guarded by its ``row_version``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from tasks_core import rules
from tasks_core.errors import StoreUnavailable, TasksError
from tasks_core.events import Transition
from tasks_core.models import built
from tasks_core.storekit import plan_transitions

from tasks_store_sql._batch import changed_rows, history_rows, watcher_rows
from tasks_store_sql.postgres._claims import PostgresClaims
from tasks_store_sql.postgres._complete_sql import plan as plan_completions

__all__ = ["PostgresTransitions"]


class PostgresTransitions(PostgresClaims):
    """Transitions of PostgreSQL on asyncpg (see the module docstring)."""

    async def _transition_checked(
        self, items: list[rules.BatchItem]
    ) -> list[Transition | TasksError]:
        """``transition_many`` of checked items: the completions of claimed runs by one
        statement (:mod:`._complete_sql`), every other item — and every
        completion the statement did not write — by the transaction that decides in
        Python (:meth:`_transition_locked`). When that transaction fails after the
        statement wrote completions, its items get its ``StoreUnavailable`` and the
        written ones their results.

        Raises:
            StoreUnavailable: transient failure; nothing was written.
        """
        results: list[Transition | TasksError | None] = [None] * len(items)
        planned = plan_completions(items, self.decoded)
        if planned.kept:
            statement = self.complete
            args = statement.args(now=self._now_arg(), **planned.parameters())

            async def op(driver: Any) -> list[Any]:
                return list(await driver.fetch(statement.sql, *args))

            for task_id, committed_at in await self._db.run_driver(op, single_statement=True):
                self.decoded.pop(task_id)
                index, (new, record) = planned.applied(task_id, rules.tick(committed_at))
                results[index] = built(Transition, outcome="applied", snapshot=new,
                                       record=record)
        rest = [index for index, result in enumerate(results) if result is None]
        if rest:
            decided: list[Transition | TasksError]
            try:
                decided = await self._transition_locked([items[index] for index in rest])
            except StoreUnavailable as exc:
                if len(rest) == len(items):
                    raise  # nothing was written
                decided = [exc] * len(rest)  # the statement's completions were
            for index, result in zip(rest, decided, strict=True):
                results[index] = result
        return [result for result in results if result is not None]

    async def _transition_locked(
        self, items: Sequence[rules.BatchItem]
    ) -> list[Transition | TasksError]:
        """``transition_many`` in a transaction: the rows locked, the clock read after the
        locks, the items decided by :func:`tasks_core.storekit.plan_transitions`, every
        changed row written once."""
        if not items:
            return []
        ids = sorted({item[0] for item in items})
        event_ids = sorted({item[2].event_id for item in items})

        async def op(driver: Any) -> list[Transition | TasksError]:
            loaded, now = await self._lock(driver, ids, event_ids)
            plan = plan_transitions(items, loaded, now or rules.tick(datetime.now(UTC)))
            await self._write(driver, changed_rows(loaded), history_rows(plan.events, loaded),
                              watcher_rows(plan.watchers), sorted(plan.wake),
                              sorted(plan.cancelled))
            return plan.results

        return await self._db.run_driver(op)
