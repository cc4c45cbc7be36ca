"""What PostgreSQL's store (:class:`~tasks_store_sql.postgres.PostgresStore`) shares: its
statements, compiled once per namespace for asyncpg, and the lock and the write every
hot-path operation runs on the driver's connection (:meth:`Database.run_driver`).

A transaction of the hot path is ``BEGIN``; one ``SELECT`` that locks the rows in id
order and reads the clock after the locks (and, for transitions, the history entries of
the items' event ids — read again when a row changed while it waited); the decision in
Python (:mod:`tasks_core.storekit`, :mod:`tasks_core.rules`); one write of data-modifying
CTEs whose counts are checked, each row guarded by its ``row_version`` (a miss rolls
everything back); ``COMMIT``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from tasks_core import rules
from tasks_core.errors import InvalidInput, StoreUnavailable
from tasks_core.events import EventRecord

from tasks_store_sql import _codec
from tasks_store_sql._batch import Loaded
from tasks_store_sql._dialect import kind_of
from tasks_store_sql._stored import STORED_COLUMNS, Stored
from tasks_store_sql._url import parse_url
from tasks_store_sql.postgres._claim_sql import claim_statement
from tasks_store_sql.postgres._complete_sql import completion_statement
from tasks_store_sql.postgres._create_sql import CreateStatements
from tasks_store_sql.postgres._statements import (
    EVENT_COLUMNS,
    ROW_COLUMNS,
    Statement,
    many_queues,
    one_queue,
)
from tasks_store_sql.store import SQLStore

__all__ = ["PostgresBase", "on_asyncpg"]


def on_asyncpg(url: object, engine: object) -> bool:
    """Whether the URL or engine (whichever is given) is PostgreSQL on asyncpg; ``False``
    for anything it cannot tell (the store's ``__init__`` says what is wrong)."""
    try:
        if isinstance(engine, AsyncEngine) and url is None:
            return kind_of(engine) == "postgresql" and engine.dialect.driver == "asyncpg"
        if isinstance(url, str) and engine is None:
            target = parse_url(url)
            return target.kind == "postgresql" and target.url.get_driver_name() == "asyncpg"
    except InvalidInput:
        pass
    return False


class PostgresBase(SQLStore):
    """The statements and row helpers of PostgreSQL on asyncpg (module docstring)."""

    def __init__(self, url: str | None = None, **options: Any) -> None:
        """See :class:`~tasks_store_sql.store.SQLStore`.

        Raises:
            InvalidInput: not PostgreSQL on asyncpg (``SQLStore`` serves the others), or
                what ``SQLStore`` refuses.
        """
        if not on_asyncpg(url, options.get("engine")):
            raise InvalidInput("PostgresStore takes a PostgreSQL URL or engine on asyncpg; "
                               "SQLStore serves every other database and driver")
        super().__init__(url, **options)
        self.sql = CreateStatements(self.tables, self._channel, self._cancel_channel)
        """The hot path's statements, each compiled when first used."""
        self._claim_sql: dict[bool, Statement] = {}

    def claim_sql(self, *, one: bool) -> Statement:
        """The claim statement of one queue or several (:mod:`._claim_sql`), built when
        first used, like :attr:`sql`'s."""
        if one not in self._claim_sql:
            queue = one_queue(self.tables.tasks) if one else many_queues(self.tables.tasks)
            self._claim_sql[one] = claim_statement(self.tables, queue)
        return self._claim_sql[one]

    @functools.cached_property
    def complete(self) -> Statement:
        """The completions of claimed runs (:mod:`._complete_sql`)."""
        return completion_statement(self.tables)

    def _now_arg(self) -> datetime | None:
        """The statements' ``now``: the injected clock's, or ``None`` (the database's)."""
        return rules.tick(self._clock.now()) if self._clock is not None else None

    async def _cancelled_among(self, driver: Any, ids: list[str]) -> list[str]:
        """Which of ``ids`` are cancelled, read on the listening connection ``driver``."""
        statement = self.sql.cancelled
        return [row[0] for row in await driver.fetch(statement.sql, *statement.args(ids=ids))]

    # -- reading and writing -------------------------------------------------------------

    async def _lock(
        self, driver: Any, ids: list[str], event_ids: list[str]
    ) -> tuple[dict[str, Loaded], datetime | None]:
        """Lock ``ids`` (id order) and read the clock and the history entries of
        ``event_ids``; see the module docstring."""
        records = await driver.fetch(
            self.sql.lock.sql,
            *self.sql.lock.args(now=self._now_arg(), ids=ids, event_ids=event_ids),
        )
        loaded: dict[str, Loaded] = {}
        latest: datetime | None = None
        raced = False
        width = len(STORED_COLUMNS)
        for task_id, *values in records:
            stored = Stored(*values[:width])
            token, version, seen, now, event_id, record, final = values[width:]
            row = loaded.get(task_id)
            if row is None:
                row = loaded[task_id] = Loaded(task_id, stored, token, version,
                                               _snapshot=self.decoded.take(task_id, stored),
                                               final_event=final)
            raced = raced or seen != version
            latest = now if latest is None else max(latest, now)
            if event_id is not None:
                row.events[event_id] = record
        if raced and event_ids:
            for row in loaded.values():
                row.events.clear()
            statement = self.sql.events
            for task_id, event_id, record in await driver.fetch(
                statement.sql, *statement.args(ids=list(loaded), event_ids=event_ids)
            ):
                loaded[task_id].events[event_id] = record
        return loaded, None if latest is None else rules.tick(latest)

    async def _write(
        self,
        driver: Any,
        rows: Sequence[Loaded],
        events: Sequence[tuple[str, EventRecord]] = (),
        members: Sequence[dict[str, Any]] = (),
        wake: Sequence[str] = (),
        cancelled: Sequence[str] = (),
    ) -> None:
        """Write ``rows`` (guarded by their ``row_version``), ``events``, ``members``,
        wake ``wake`` and tell the waiters of ``cancelled`` (tasks the rows cancel) in
        one statement.

        Raises:
            StoreUnavailable: a row changed under the lock (a bug, or a lost lock):
                nothing is committed.
        """
        if not (rows or wake):
            return
        values: dict[str, Any] = {"ids": [r.id for r in rows],
                                  "versions": [r.row_version for r in rows]}
        projected = [r.values() for r in rows]
        for name, _ in ROW_COLUMNS:
            values[name] = [p[name] for p in projected]
        encoded = [_codec.event_row(task_id, record) for task_id, record in events]
        for name, _ in EVENT_COLUMNS:
            values["e_" + name] = [e[name] for e in encoded]
        statement = self.sql.write_cancelling if cancelled else self.sql.write
        counts = await driver.fetchrow(statement.sql, *statement.args(
            members=_codec.encode(list(members)), wake=sorted(set(wake)),
            cancelled=sorted(set(cancelled)), **values
        ))
        if tuple(counts[:3]) != (len(rows), len(events), len(members)):
            raise StoreUnavailable("A task changed during the write; nothing was written")
