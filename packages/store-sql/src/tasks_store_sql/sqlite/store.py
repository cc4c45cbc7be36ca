"""``SQLiteStore``: the SQL store on a SQLite file opened from a URL — ``SQLStore`` with a
fresh task's ``create`` run on a writer connection of its own (:mod:`._writer`): the
whole transaction in one thread hop instead of a hop per statement of the driver.

What it runs there: ``BEGIN IMMEDIATE``; the creators' count raised by one and the
tenant's bound raised by one where one is stored (:mod:`tasks_store_sql._scopes`), if a
count is kept (:mod:`tasks_store_sql._counting`); the task and its members inserted;
``COMMIT`` — the writes of ``SQLStore``'s create of a task whose id
is free while both capacity limits leave room without a count. Anything else (a taken
id, a count at either limit, a replacement, the application's transaction) is rolled
back there and decided by ``SQLStore``'s create, so every refusal is decided in one
place. Everything but ``create`` is ``SQLStore``'s.
"""

from __future__ import annotations

import functools
import sqlite3
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from tasks_core import rules
from tasks_core.errors import InvalidInput
from tasks_core.models import NewTask, Snapshot

from tasks_store_sql import _codec
from tasks_store_sql._counting import counting_starts
from tasks_store_sql._dialect import sqlite_connect_args
from tasks_store_sql._errors import translate
from tasks_store_sql._schema import COUNTER, UNCOUNTED
from tasks_store_sql._scopes import scope_lock
from tasks_store_sql._url import parse_url
from tasks_store_sql.sqlite._writer import Prepared, WriterConnection, in_transaction
from tasks_store_sql.store import SQLStore

__all__ = ["SQLiteStore", "on_sqlite_file"]


def on_sqlite_file(url: object, engine: object) -> bool:
    """Whether a store of ``url`` (no engine given) is on a SQLite file; ``False`` for
    anything it cannot tell (the store's ``__init__`` says what is wrong)."""
    if engine is not None or not isinstance(url, str):
        return False
    try:
        target = parse_url(url)
    except InvalidInput:  # SQLStore's __init__ reports a bad URL
        return False
    return target.kind == "sqlite" and not target.memory


class SQLiteStore(SQLStore, serves=on_sqlite_file):
    """The SQL store on a SQLite file given by URL (see ``SQLStore`` for URLs, options and
    capabilities, which are the same); its creates of fresh tasks run on a writer
    connection of its own (module docstring)."""

    def __init__(self, url: str | None = None, **options: Any) -> None:
        """See :class:`~tasks_store_sql.store.SQLStore`.

        Raises:
            InvalidInput: what ``SQLStore`` refuses.
        """
        super().__init__(url, **options)
        engine = self._db.engine
        dialect = engine.dialect
        args, kwargs = dialect.create_connect_args(engine.url)
        kwargs.update(sqlite_connect_args(self._db.busy_timeout,
                                          options.get("engine_options")))
        self._writer = WriterConnection(functools.partial(sqlite3.connect, *args, **kwargs),
                                        set_wal=self._may_create)
        t = self.tables
        locks = t.locks
        self._count_one = Prepared(
            sa.update(locks).where(locks.c.name == COUNTER)
            .values(value=sa.case((locks.c.value == UNCOUNTED, UNCOUNTED),
                                  else_=locks.c.value + 1))
            .returning(locks.c.value), dialect)
        self._raise_bound = Prepared(
            sa.update(locks).where(locks.c.name == sa.bindparam("scope"))
            .values(value=locks.c.value + 1), dialect)
        self._insert_task = Prepared(
            sqlite.insert(t.tasks).on_conflict_do_nothing(index_elements=[t.tasks.c.id]),
            dialect)
        self._insert_member = Prepared(sa.insert(t.members), dialect)

    async def _create_own(self, new: NewTask, replace: Snapshot | None) -> Snapshot:
        """A fresh task on the writer connection (module docstring); what that leaves,
        and a replacement, as ``SQLStore`` creates."""
        if replace is None:
            async with self._db.write_slot():
                with translate(self._db.what):
                    created = await self._db.when_free(
                        lambda: self._writer.run(functools.partial(self._fresh, new)))
            if created is not None:
                return created
        return await super()._create_own(new, replace)

    def _fresh(self, new: NewTask, connection: sqlite3.Connection) -> Snapshot | None:
        """``new`` created in one transaction on ``connection`` if its id is free and
        the stored tasks leave room under both limits; else nothing written, ``None``."""
        return in_transaction(connection, lambda: self._insert_fresh(new, connection))

    def _insert_fresh(self, new: NewTask, connection: sqlite3.Connection) -> Snapshot | None:
        counted = connection.execute(self._count_one.sql, self._count_one.params({}))
        total = counted.fetchone()
        if total is None or total[0] > min(self.limits.tasks_cap, self.limits.scope_cap):
            return None  # no creators' row, or a limit to decide: SQLStore's create
        if counting_starts(total[0], self.limits):
            return None  # SQLStore's create starts the count
        snapshot = rules.new_snapshot(new, self._clock_now())
        row = {"id": snapshot.id, "row_version": 0, **_codec.projection(snapshot, None)}
        if connection.execute(self._insert_task.sql, self._insert_task.params(row)).rowcount != 1:
            return None  # the id is taken
        if total[0] != UNCOUNTED:
            connection.execute(self._raise_bound.sql,
                               self._raise_bound.params({"scope": scope_lock(new.tenant)}))
        members = _codec.member_rows(snapshot)
        if members:
            connection.executemany(self._insert_member.sql,
                                   [self._insert_member.params(m) for m in members])
        return snapshot

    def _clock_now(self) -> datetime:
        """The store clock, as ``SQLStore`` reads it on SQLite (injected, else this
        machine's), whole milliseconds."""
        return rules.tick(self._clock.now() if self._clock is not None else datetime.now(UTC))

    async def aclose(self) -> None:
        """Close the writer connection, then what ``SQLStore`` closes."""
        await self._writer.close()
        await super().aclose()
