"""PostgreSQL's ``create`` on asyncpg: the creates of an event loop that arrive together
in one statement (:meth:`PostgresCreates.create_at_once`), the rest in a transaction.

While a count is kept, the statement locks the creators' row, reads the clock after that
lock, and inserts the tasks, their members, the count and the ``NOTIFY`` while the store
stays within both capacity limits; while nothing is counted, a store without limits sends
one that inserts without that row (``_counting``). Each body comes from Python as it is
stored (it holds no instant the clock gives: ``_stored.ROW_KEYS``); the statement puts the
clock's instants in the columns. What it cannot decide alone — a taken id, a group that
would pass a limit, a mode it does not serve, a replacement — goes to the transaction
(``BEGIN``, the lock with the clock, the checks in Python, the insert, ``COMMIT``).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core import rules
from tasks_core.errors import (
    CapacityExceeded,
    StoreError,
    StoreUnavailable,
    TaskExists,
    TaskNotFound,
)
from tasks_core.models import NewTask, Snapshot, StoreLimits, replaced

from tasks_store_sql import _codec
from tasks_store_sql._batch import Loaded
from tasks_store_sql._counting import counting_starts
from tasks_store_sql._grouped import Grouped
from tasks_store_sql._schema import MISSING_COUNTER, UNCOUNTED
from tasks_store_sql._scopes import room_for_one, scope_lock
from tasks_store_sql.postgres._create_sql import NEW_COLUMNS
from tasks_store_sql.postgres._statements import MILLISECOND
from tasks_store_sql.postgres._transitions import PostgresTransitions

__all__ = ["GROUP_MOST", "PostgresCreates"]

GROUP_MOST = 100
"""The most new tasks one statement creates."""


class PostgresCreates(PostgresTransitions):
    """Creates of PostgreSQL on asyncpg (see the module docstring)."""

    def __init__(self, url: str | None = None, **options: Any) -> None:
        super().__init__(url, **options)
        self._creates: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, Grouped[NewTask, Snapshot | None]
        ] = weakref.WeakKeyDictionary()
        """Each event loop's creates, run together."""
        self._counted = False
        """Whether the namespace kept a count as the last one-statement create read it
        (which of the two statements a store without limits sends)."""

    async def _create_own(self, new: NewTask, replace: Snapshot | None) -> Snapshot:
        """A new task with the others of this event loop at once (:meth:`create_at_once`);
        what that leaves, and a replacement, in a transaction in the creators' turn."""
        if replace is None:
            created = await self._grouped_creates()(new)
            if created is not None:
                return created
        return await super()._create_own(new, replace)

    def _grouped_creates(self) -> Grouped[NewTask, Snapshot | None]:
        """The creates of this event loop, run together (:mod:`tasks_store_sql._grouped`)."""
        return self._of_this_loop(
            self._creates, lambda: Grouped(self._create_group, GROUP_MOST))

    async def _create_group(self, news: list[NewTask]) -> list[Snapshot | None]:
        """New tasks created in one statement, holding the creators' turn
        (:meth:`create_at_once`); ``None`` for each it left to the transaction."""
        async with self._creator_turn():
            return await self.create_at_once(news, self.limits)

    async def _create(
        self, new: NewTask, replace: Snapshot | None, connection: AsyncConnection | None
    ) -> Snapshot:
        """``create`` in a transaction on the driver: the creators' row locked with the
        clock, the checks in Python, the insert (or the replacement's write). On the
        application's ``connection``: the SQL store's."""
        if connection is not None:
            return await super()._create(new, replace, connection)
        sql, limits = self.sql, self.limits

        async def taken(driver: Any) -> Loaded | None:
            found = await driver.fetchrow(sql.existing.sql, *sql.existing.args(id=new.id))
            return None if found is None else Loaded.of(found)

        async def refuse(driver: Any, limit: str, now: datetime, checked: bool) -> None:
            """A taken id is refused before any capacity limit."""
            row = None if checked else await taken(driver)
            if row is not None:
                raise TaskExists(rules.present(row.snapshot, now))
            raise CapacityExceeded(limit)

        async def op(driver: Any) -> Snapshot:
            total, clock, seen = await self._held_count(driver, new.id)
            now = rules.tick(clock)
            checked = bool(seen) or replace is not None  # else: read only if it matters
            row = await taken(driver) if checked else None
            current = row.snapshot if row is not None else None
            if replace is None and current is not None:
                raise TaskExists(rules.present(current, now))
            if replace is not None:
                if current is None:
                    raise TaskNotFound(new.id)
                rules.check_replace(current, replace, now)
            if total is not None:
                if row is None and total >= limits.tasks_cap:
                    await refuse(driver, "max_tasks", now, checked)
                scope = scope_lock(new.tenant)

                async def count() -> int:
                    return int(await driver.fetchval(sql.active.sql, *sql.active.args(
                        tenant=new.tenant, now=now, id=new.id,
                        cap=limits.scope_cap,
                    )))

                async def read_bound() -> int | None:
                    value = await driver.fetchval(sql.bound.sql, *sql.bound.args(name=scope))
                    return None if value is None else int(value)

                room = await room_for_one(total - (1 if row is not None else 0),
                                          limits.scope_cap, read_bound, count)
                if room.full:
                    await refuse(driver, "max_active_tasks_per_scope", now, checked)
                if room.bound is None:
                    await driver.execute(sql.raise_bound.sql,
                                         *sql.raise_bound.args(name=scope))
                else:
                    await driver.execute(sql.store_bound.sql,
                                         *sql.store_bound.args(name=scope, value=room.bound))
            snapshot = rules.new_snapshot(new, now, replace=current)
            members = _codec.member_rows(snapshot)
            if row is None:
                if not await self._insert(driver, snapshot, members,
                                          counted=total is not None):
                    row = await taken(driver)  # created since the lock statement began
                    assert row is not None
                    raise TaskExists(rules.present(row.snapshot, now))
            else:
                await driver.execute(sql.forget_events.sql, *sql.forget_events.args(id=new.id))
                await driver.execute(sql.forget_members.sql, *sql.forget_members.args(id=new.id))
                row.put(snapshot, None)
                await self._write(driver, [row], members=members, wake=[snapshot.queue])
            return snapshot

        return await self._db.run_driver(op)

    async def _held_count(self, driver: Any, task_id: str) -> tuple[int | None, Any, bool]:
        """The creators' row, locked while it holds a count: the stored tasks (``None``
        while nothing is counted and this store sets no limit: then nothing is locked but
        ``tasks``, in ``ROW EXCLUSIVE`` mode, first), the clock after the lock, and whether
        ``task_id`` was taken as the statement began (``CreateStatements.counter``). A
        store with a limit that finds no count starts it — ``tasks`` locked in ``SHARE``
        mode, then counted into the row (:mod:`tasks_store_sql._counting`) — and reads
        the row again.

        Raises:
            StoreError: the creators' row is missing.
        """
        sql = self.sql
        if not self.limits.any_set:
            await driver.execute(sql.row_exclusive_lock)
        locked = await driver.fetchrow(
            sql.counter.sql, *sql.counter.args(now=self._now_arg(), id=task_id))
        if locked is None:
            raise StoreError(MISSING_COUNTER)
        if counting_starts(locked[0], self.limits):
            await driver.execute(sql.share_lock)
            await driver.execute(sql.count_stored.sql, *sql.count_stored.args())
            locked = await driver.fetchrow(
                sql.counter.sql, *sql.counter.args(now=self._now_arg(), id=task_id))
        value, clock, seen = locked
        return (None if value == UNCOUNTED else int(value)), clock, bool(seen)

    async def create_at_once(
        self, news: Sequence[NewTask], limits: StoreLimits
    ) -> list[Snapshot | None]:
        """``create`` of new tasks in one statement, its own transaction (one round trip,
        no ``BEGIN``/``COMMIT``); for each, the snapshot created, or ``None`` with nothing
        written for it when the statement cannot decide alone — its id is taken (or comes
        twice), the store would hold more than ``max_tasks`` tasks, a tenant's bound leaves
        no room for its tasks of the group (it may be full: the transaction counts it; then
        none is created), or the namespace's mode is not the statement's — for the
        transaction that decides (:meth:`_create`).

        The statement: :attr:`CreateStatements.create` while a count is kept or
        ``limits`` set one, else :attr:`CreateStatements.create_uncounted`; the mode each
        reads picks the next one (a store without limits follows a count that another
        store started, the transaction counting the group that found it).

        Each snapshot is made in Python at a stand-in instant; its body holds none of its
        instants, and the statement writes the instant columns from the clock it reads
        after the creators' lock (a delay's ``run_at``, the TTL's expiry: shifted from it):
        what is stored is exactly the snapshot made at that clock, which is returned. A
        task given an instant ``run_at`` (clamped to the clock) goes to the transaction.

        Raises:
            StoreUnavailable: transient failure; nothing was written.
        """
        made: dict[str, Snapshot] = {}
        rows: list[dict[str, Any]] = []
        members: list[dict[str, Any]] = []
        seen: set[str] = set()
        for new in news:
            if new.id in seen:  # an id that comes twice is tried once, for its first caller
                continue
            seen.add(new.id)
            if new.run_at is not None:  # clamped to the clock: decide in a transaction
                continue
            snapshot = rules.new_snapshot(new, _STAND_IN)
            shifts = {name: None if at is None else (at - _STAND_IN) // MILLISECOND
                      for name, at in _clocked(snapshot).items()}
            columns = _codec.projection(snapshot, None)
            made[new.id] = snapshot
            rows.append({
                "n": len(rows), "id": new.id,
                **{name: columns[name] for name, _ in NEW_COLUMNS},
                "ttl": shifts["expires_at"], "delay": shifts["run_at"],
                "body": columns["snapshot"],
            })
            members += _codec.member_rows(snapshot)
        if not made:
            return [None] * len(news)
        counted = self._counted or limits.any_set
        statement = self.sql.create if counted else self.sql.create_uncounted
        args = statement.args(now=self._now_arg(), most=limits.tasks_cap - len(made),
                              max_active=limits.scope_cap,
                              rows=_codec.encode(rows), members=_codec.encode(members))

        async def op(driver: Any) -> Any:
            return await driver.fetchrow(statement.sql, *args)

        ids, clock, mode, *_ = await self._db.run_driver(op, single_statement=True)
        self._counted = mode != UNCOUNTED
        created: dict[str, Snapshot] = {}
        if ids:
            now = rules.tick(clock)
            for task_id in ids:
                snapshot = made[task_id]
                created[task_id] = replaced(snapshot, **{
                    name: None if at is None else now + (at - _STAND_IN)
                    for name, at in _clocked(snapshot).items()})
        outcomes: list[Snapshot | None] = []
        for new in news:
            outcomes.append(created.pop(new.id, None))  # a second caller of an id: None
        return outcomes

    async def _insert(
        self, driver: Any, snapshot: Snapshot, members: Sequence[dict[str, Any]], *,
        counted: bool,
    ) -> bool:
        """Insert ``snapshot`` (added to the creators' count when ``counted``); ``False``
        (nothing written) when its id is taken.

        Raises:
            StoreUnavailable: the creators' lock row is missing.
        """
        statement = self.sql.insert
        counts = await driver.fetchrow(statement.sql, *statement.args(
            id=snapshot.id, members=_codec.encode(list(members)),
            **_codec.projection(snapshot, None),
        ))
        if counts[0] == 0:
            return False
        if tuple(counts[:3]) != (1, int(counted), len(members)):
            raise StoreUnavailable("The creators' lock row is missing: nothing was written")
        return True


def _clocked(snapshot: Snapshot) -> dict[str, datetime | None]:
    """The instants of a new task's snapshot that the clock gives (``None``: not set)."""
    return {"created_at": snapshot.created_at, "updated_at": snapshot.updated_at,
            "run_at": snapshot.run_at, "expires_at": snapshot.expires_at}


_STAND_IN = datetime(2000, 1, 1, tzinfo=UTC)
"""The instant a new task's snapshot is made at before the statement reads the clock:
its instants are columns, written from the clock and these shifts from it."""
