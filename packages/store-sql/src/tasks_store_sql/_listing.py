"""``list`` on the SQL path, every dialect: a query's tasks in id order, a page at a time.

A listing reads the rows in id order (the primary key, a tenant's index, a principal's owner
index and members) and keeps those the query matches. Rule: whatever path it takes, a page
is the first ``limit`` matching tasks after ``after`` in id order; expired and corrupt
records are left out without shortening it. A listing by status that the status index does not
serve walks at most :attr:`ListOps.walk` rows past its cursor, up to a fence; short of a
page, it counts the rows stored with those statuses (index-only, up to
:attr:`ListOps.candidates`): fewer, and the rest past the fence is read from the indexes
holding them (:meth:`ListOps._held`), the first in id order making the page; as many,
and the walk goes on from the fence.
"""

from __future__ import annotations

import builtins
import functools
import logging
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core import reports, rules
from tasks_core.errors import InvalidInput, StoreCorrupt
from tasks_core.models import Snapshot, TaskQuery, TaskStatus

from tasks_store_sql import _codec
from tasks_store_sql._counts import CountOps
from tasks_store_sql._schema import LISTED, inline, listed, pending, task_indexes, unclaimed
from tasks_store_sql._stored import STORED_COLUMNS, Stored, stored_columns
from tasks_store_sql._types import Instant

__all__ = ["CANDIDATES", "WALK", "ListOps"]

log = logging.getLogger("tasks_store_sql")

WALK = 1000
"""Rows a status listing walks in id order past its cursor before it reads the indexes."""
CANDIDATES = 10_000
"""Rows stored with a listing's statuses (in its tenant and queue) below which they are
rare: read past the fence from their indexes."""
COUNTS_INDEX = "ix_tasks_counts"
_STORED = {status: TaskStatus.PENDING for status in (
    TaskStatus.SCHEDULED, TaskStatus.RUNNING, TaskStatus.CLAIMED)}
"""The derived statuses, each stored as ``pending``."""

NOW = sa.bindparam("now", type_=Instant())
"""The store's instant of the listing (every statement here binds it as ``now``)."""
LIMIT = sa.bindparam("limit", type_=sa.Integer)
CANDIDATES_BOUND = sa.bindparam("candidates", type_=sa.Integer)
Rows = builtins.list[tuple[str, Stored]]


class ListOps(CountOps):
    """``list`` (see the module docstring)."""

    walk = WALK
    candidates = CANDIDATES

    async def list(self, query: TaskQuery) -> builtins.list[Snapshot]:
        """Matching tasks ordered by id (see ``TaskStore.list``); expired and corrupt
        records are left out without shortening the page.

        Raises:
            InvalidInput: ``query`` is not a ``TaskQuery``.
            StoreUnavailable: transient failure.
        """
        if not isinstance(query, TaskQuery):
            raise InvalidInput("list() takes a TaskQuery")
        await self._ensure_ready()

        async def op(conn: AsyncConnection) -> builtins.list[Snapshot]:
            now = await self._now(conn)
            page: builtins.list[Snapshot] = []
            after = query.after
            while len(page) < query.limit:
                want = query.limit - len(page)
                rows = await self._rows(conn, query, now, after, want)
                for task_id, stored in rows:
                    try:
                        snapshot = _codec.decode_snapshot(task_id, stored)
                    except StoreCorrupt:
                        reports.corrupt_skipped(log, task_id, "a listing")
                        continue
                    if rules.matches(snapshot, query, now):
                        page.append(rules.present(snapshot, now))
                if len(rows) < want:
                    break
                after = rows[-1][0]
            return page

        return await self._db.run(op, write=False)

    async def _rows(self, conn: AsyncConnection, query: TaskQuery, now: datetime,
                    after: str | None, want: int) -> Rows:
        """The first ``want`` rows ``(id, stored)`` after ``after`` in id order that the
        statement's conditions match (fewer: there are no more)."""
        values = {"now": now, "after": after, "queue": query.queue, "tenant": query.tenant,
                  "walk": self.walk, "candidates": self.candidates, "limit": want}
        if query.principal is not None:
            values.update(member=query.principal.tenant, user=query.principal.user_id)
        if query.statuses is None or query.principal is not None or (
                query.statuses <= set(LISTED)):
            plain = self._statement("listing", query, after is not None)
            return _pairs((await conn.execute(plain, values)).all())
        walk = self._statement("walk", query, after is not None)
        walked = (await conn.execute(walk, {**values, "limit": want + 1})).all()
        rows = [pair for pair, row in zip(_pairs(walked), walked, strict=True)
                if row[-2]][:want]  # (hit, then n: the walk's last columns)
        fence = next((row[0] for row in walked if row[-1] == self.walk), None)
        if len(rows) == want or fence is None:
            return rows
        values.update(after=fence, limit=want - len(rows))
        rare = await conn.scalar(self._statement("rarity", query, False), values)
        rest = self._statement("past" if rare < self.candidates else "listing", query, True)
        return rows + _pairs((await conn.execute(rest, values)).all())  # not rare: walk on

    def _statement(self, kind: str, query: TaskQuery, after: bool) -> sa.Select[Any]:
        """The statement ``kind`` for the shape of ``query`` (its statuses, which filters it
        has, whether a cursor is given), built once with bound parameters (``now``,
        ``after``, ``queue``, ``tenant``, ``member``, ``user``, ``limit``, ``walk``,
        ``candidates``): a listing reads many pages of one shape."""
        key = (kind, query.statuses, query.queue is not None, query.tenant is not None,
               query.principal is not None, after)
        found = self._shapes.get(key)
        if found is None:
            build = {"listing": self._listing, "walk": self._walk, "past": self._past,
                     "rarity": self._rarity}[kind]
            found = self._shapes[key] = build(query, after)
        return found

    @functools.cached_property
    def _shapes(self) -> dict[tuple[Any, ...], sa.Select[Any]]:
        return {}

    def _scope(self, query: TaskQuery) -> builtins.list[sa.ColumnElement[bool]]:
        """The conditions of ``query`` but its tenant, cursor and statuses."""
        t = self.tables.tasks
        found = [sa.or_(t.c.expires_at.is_(None), t.c.expires_at > NOW)]
        if query.queue is not None:
            found.append(t.c.queue == sa.bindparam("queue"))
        return found

    def _tenant(self, query: TaskQuery) -> builtins.list[sa.ColumnElement[bool]]:
        t = self.tables.tasks
        return [] if query.tenant is None else [t.c.tenant == sa.bindparam("tenant")]

    def _statuses(self, statuses: frozenset[TaskStatus]) -> sa.ColumnElement[bool]:
        return sa.or_(sa.false(), *(self._status_is(s) for s in sorted(statuses)))

    def _listing(self, query: TaskQuery, after: bool) -> sa.Select[Any]:
        """The plain walk: matching rows after ``after`` in id order, as far as it must;
        by principal, the first of the tasks it owns (the owner index, in id order) and
        of those it watches (the members' primary key, in task id order) — a watcher row
        never names the owner (``rules.apply_event``, ``_codec.member_rows``), so no task
        comes twice."""
        t = self.tables.tasks
        row = sa.select(t.c.id, *stored_columns(t))
        if query.principal is None:
            return self._matching(query, row, t.c.id, after)
        m = self.tables.members
        member = sa.bindparam("member", type_=t.c.tenant.type)
        user = sa.bindparam("user", type_=t.c.owner.type)
        owned = row.where(t.c.tenant == member, t.c.owner == user)
        watched = (row.select_from(m.join(t, t.c.id == m.c.task_id))
                   .where(m.c.tenant == member, m.c.user_id == user))
        both = sa.union_all(
            sa.select(self._matching(query, owned, t.c.id, after).subquery()),
            sa.select(self._matching(query, watched, m.c.task_id, after).subquery()),
        ).subquery("principal")
        return sa.select(*both.c).order_by(both.c.id).limit(LIMIT)

    def _matching(self, query: TaskQuery, stmt: sa.Select[Any], key: sa.ColumnElement[str],
                  after: bool) -> sa.Select[Any]:
        """``stmt`` narrowed to the rows ``query`` matches past ``after``, the first
        ``limit`` in the order of ``key`` (the task id, as the index read stores it)."""
        t = self.tables.tasks
        stmt = stmt.where(*self._scope(query), *self._tenant(query))
        if after:
            stmt = stmt.where(key > sa.bindparam("after"))
        if query.statuses is not None:
            stmt = stmt.where(self._statuses(query.statuses))
            if query.statuses <= set(LISTED):
                stmt = stmt.where(listed(t.c.status))  # the status index, in id order
        return stmt.order_by(key).limit(LIMIT)

    def _walk(self, query: TaskQuery, after: bool) -> sa.Select[Any]:
        """The bounded walk: the next ``walk`` rows of the tenant after ``after`` in id
        order, numbered, each marked whether it matches; of them the matching ones and the
        last (the fence), in id order — no more than ``limit``."""
        t = self.tables.tasks
        hit = sa.and_(*self._scope(query), self._statuses(query.statuses or frozenset()))
        cursor = [t.c.id > sa.bindparam("after")] if after else []
        walk = sa.bindparam("walk", type_=sa.Integer)
        walked = (
            sa.select(t.c.id, *stored_columns(t), sa.case((hit, 1), else_=0).label("hit"),
                      sa.func.row_number().over(order_by=t.c.id).label("n"))
            .where(*self._tenant(query), *cursor)
            .order_by(t.c.id)
            .limit(walk)
            .subquery("walked")
        )
        return (sa.select(*walked.c)
                .where(sa.or_(walked.c.hit == 1, walked.c.n == walk))
                .order_by(walked.c.id)
                .limit(LIMIT))

    def _rarity(self, query: TaskQuery, _: bool) -> sa.Select[Any]:
        """How many rows of the tenant and queue have the stored statuses of ``query``, up
        to ``candidates`` (an index-only count on the counts index)."""
        t = self.tables.tasks
        stored = sorted({_STORED.get(status, status).value for status in query.statuses or ()})
        scope = [] if query.queue is None else [t.c.queue == sa.bindparam("queue")]
        some = (sa.select(t.c.status)
                .where(t.c.status.in_([inline(value) for value in stored]),
                       *scope, *self._tenant(query))
                .order_by(*self._columns[COUNTS_INDEX])  # that index's order
                .limit(CANDIDATES_BOUND)
                .subquery())
        return sa.select(sa.func.count()).select_from(some)

    def _past(self, query: TaskQuery, _: bool) -> sa.Select[Any]:
        """The first ``limit`` matching rows past the fence (``after``) in id order, read
        from the indexes that hold them (:meth:`_held`; each in its own order, at most
        ``candidates``)."""
        t = self.tables.tasks
        held: dict[str, builtins.list[sa.ColumnElement[bool]]] = {}
        for status in sorted(query.statuses or ()):
            for name, where in self._held(status).items():
                held.setdefault(name, []).append(where)
        arms = []
        for name, wheres in held.items():
            arm = (
                sa.select(t.c.id)
                .where(sa.or_(*wheres), self._predicates[name], *self._scope(query),
                       *self._tenant(query), t.c.id > sa.bindparam("after"))
                .order_by(*self._columns[name])  # that index's order
                .limit(CANDIDATES_BOUND)
                .subquery()
            )
            arms.append(sa.select(arm.c.id))
        found = sa.union_all(*arms).subquery("found")
        first = sa.select(found.c.id).order_by(found.c.id).limit(LIMIT).subquery("first")
        return (sa.select(t.c.id, *stored_columns(t))
                .join(first, t.c.id == first.c.id)
                .order_by(t.c.id))

    @functools.cached_property
    def _columns(self) -> dict[str, builtins.list[sa.Column[Any]]]:
        """The columns of each index of ``tasks``, by its name without prefix."""
        prefix = self.tables.prefix
        return {str(index.name).removeprefix(prefix): list(index.columns)
                for index in self.tables.tasks.indexes}

    @functools.cached_property
    def _predicates(self) -> dict[str, sa.ColumnElement[bool]]:
        """The predicate of each index of ``tasks`` (``true`` for the counts index, over
        every row), by its name without prefix."""
        found = {name: where for name, _, where in task_indexes(self.tables.tasks.c)}
        return {**found, COUNTS_INDEX: sa.true()}

    def _status_is(self, status: TaskStatus) -> sa.ColumnElement[bool]:
        """The stored rows that may read ``status`` at ``now`` (``rules.matches`` tells)."""
        return sa.or_(*self._held(status).values())

    def _held(self, status: TaskStatus) -> dict[str, sa.ColumnElement[bool]]:
        """The stored rows that may read ``status`` at ``now``, by the index (its name
        without prefix) that holds them. The derived statuses are stored ``pending``: rows
        without a lease are the claim index's, those with one (live, or lapsed: read as
        not leased) the lease index's. Completed rows are only in the counts index, over
        every row: no index gains an entry per completed task (issue 37's budget)."""
        t = self.tables.tasks
        if status in (TaskStatus.RUNNING, TaskStatus.CLAIMED):
            return {"ix_tasks_lease": sa.and_(pending(t.c.status), t.c.claim_expires_at > NOW)}
        if status in (TaskStatus.PENDING, TaskStatus.SCHEDULED):
            due = (sa.or_(t.c.run_at.is_(None), t.c.run_at <= NOW)
                   if status == TaskStatus.PENDING else t.c.run_at > NOW)
            return {"ix_tasks_claim": sa.and_(unclaimed(t.c), due),
                    "ix_tasks_lease": sa.and_(pending(t.c.status),
                                              t.c.claim_expires_at <= NOW, due)}
        stored = t.c.status == inline(status.value)
        return {"ix_tasks_status" if status in LISTED else COUNTS_INDEX: stored}


def _pairs(rows: Any) -> Rows:
    """``(id, stored)`` of rows read as ``id`` and the stored columns (and any after)."""
    width = len(STORED_COLUMNS)
    return [(row[0], Stored(*row[1:1 + width])) for row in rows]
