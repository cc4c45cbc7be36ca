"""The PostgreSQL hot path on asyncpg: claims, transitions and lease operations in as few
round trips as the guarantees allow.

Every statement here is a SQLAlchemy Core construct compiled once per namespace for
asyncpg (no SQL is built from strings, no statement is built per call) and executed on
the driver's connection inside one transaction (:meth:`Database.run_driver`), so asyncpg's
prepared-statement cache serves every call after the first on a connection. Per operation:

- ``BEGIN``;
- one ``SELECT`` that locks the rows (``FOR UPDATE`` in a subquery, in id order; claims
  ``FOR UPDATE SKIP LOCKED``) and reads ``clock_timestamp()`` in the outer query — after
  each row is locked — and, for transitions, joins the history entries of the items'
  event ids (the replay check). Under ``READ COMMITTED`` that join sees the statement's
  snapshot, which predates a wait for the lock; the same query also reads each row's
  ``row_version`` as of that snapshot, and when a row changed while we waited the history
  is read again by a second statement;
- the rules decide in Python (:mod:`tasks_store_sql._batch`, :mod:`tasks_core.rules`);
- one write: ``UPDATE … FROM unnest(…) WHERE id AND row_version`` for every changed row,
  ``INSERT`` of the applied events, new watchers and ``pg_notify`` — of the queues woken
  and, when the batch cancels tasks, of their ids on the cancel channel
  (``wait_for_cancels``) — a single statement of data-modifying CTEs, whose counts are
  checked (a miss rolls everything back);
- ``COMMIT``.

A batch of transitions (``transition_many``) costs the same four round trips and one
commit as a single one — and the ``completed`` events of runs this store claimed, one
statement of their own (:mod:`tasks_store_sql._pg_complete`: the row guarded by the
``row_version`` its claim returned, the new text made from the claim's, no ``BEGIN``/
``COMMIT``); what that statement does not write goes to the transaction above.

``claim_next`` is one statement, its own transaction (one round trip, one commit): it
locks the oldest claimable rows (``SKIP LOCKED``), reads the clock after the locks and
applies ``rules.start_claim`` to each row in SQL (:mod:`tasks_store_sql._pg_claim`), so a
claim needs no ``BEGIN``, no decision round trip and no ``COMMIT`` of its own. The
statement claims new tasks only; when it leaves a candidate alone, a second one claims
any head, and rows that one leaves alone (past the delivery limit, unreadable) go to the
claim decided in Python above (:meth:`FastPath._claim_locked`).

``create`` of new tasks is one statement as well (:meth:`FastPath.create_at_once`, for
the creates of an event loop that arrive together: ``SQLStore.create``): it locks the
creators' row, reads the clock after that lock, and inserts the tasks, their members,
the count and the ``NOTIFY`` while the store stays within both capacity limits; each
snapshot text comes from Python cut at its instants, and the statement spells the clock
into the cuts. What it cannot decide alone — a taken id, a group that would pass a
limit, a replacement — goes to the transaction (``BEGIN``, the lock with the clock, the
checks in Python, the insert, ``COMMIT``).
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg  # type: ignore[import-untyped,unused-ignore]
from tasks_core import reports, rules
from tasks_core.clock import Clock
from tasks_core.errors import (
    CapacityExceeded,
    LeaseLost,
    StoreCorrupt,
    StoreError,
    StoreUnavailable,
    TaskExists,
    TaskNotFound,
    TasksError,
    Unavailable,
)
from tasks_core.events import EventRecord, Transition
from tasks_core.models import Claim, Lease, NewTask, Snapshot, StoreLimits, built

from tasks_store_sql import _codec, _pg_complete
from tasks_store_sql._batch import Loaded, Plan, corrupt_or, decide
from tasks_store_sql._db import CommitThenRaise, Database
from tasks_store_sql._pg_claim import claim_statement, fresh_claim_statement
from tasks_store_sql._pg_statements import (
    EVENT_COLUMNS,
    MILLISECOND,
    NEW_COLUMNS,
    ROW_COLUMNS,
    Statement,
    Statements,
    join_list,
    many_queues,
    one_queue,
)
from tasks_store_sql._schema import MISSING_COUNTER, Tables
from tasks_store_sql._scopes import room_for_one, scope_lock

__all__ = ["FastPath"]

log = logging.getLogger("tasks_store_sql")
UNREADABLE = (asyncpg.DataError, asyncpg.ProgramLimitExceededError)
"""What PostgreSQL raises on stored text the claim statement cannot take apart (not JSON,
not an object, nested past its stack, a counter that is not an integer)."""


class FastPath:
    """The hot-path operations of one ``SQLStore`` on PostgreSQL with asyncpg."""

    def __init__(
        self, db: Database, tables: Tables, clock: Clock | None, channel: str,
        decoded: _codec.Decoded, cancel_channel: str,
    ) -> None:
        self.db = db
        self.clock = clock
        self.tables = tables
        self.sql = Statements(tables, channel, cancel_channel)
        self.decoded = decoded  # what a claim decoded, for its completion (the store's)
        self._claim_sql: dict[tuple[bool, bool], Statement] = {}

    def claim_sql(self, *, one: bool, fresh: bool) -> Statement:
        """The claim statement of one queue or several, of fresh rows only or of any
        (:mod:`tasks_store_sql._pg_claim`), built when first used, like :attr:`sql`'s."""
        key = (one, fresh)
        if key not in self._claim_sql:
            queue = one_queue(self.tables.tasks) if one else many_queues(self.tables.tasks)
            build = fresh_claim_statement if fresh else claim_statement
            self._claim_sql[key] = build(self.tables, queue)
        return self._claim_sql[key]

    @functools.cached_property
    def complete(self) -> Statement:
        """The completions of claimed runs (:mod:`tasks_store_sql._pg_complete`)."""
        return _pg_complete.completion_statement(self.tables)

    def _now_arg(self) -> datetime | None:
        return rules.tick(self.clock.now()) if self.clock is not None else None

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
        for task_id, text, token, version, seen, now, event_id, record in records:
            row = loaded.get(task_id)
            if row is None:
                row = loaded[task_id] = Loaded(task_id, text, token, version,
                                               _snapshot=self.decoded.take(task_id, text))
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

    # -- transitions ---------------------------------------------------------------------

    async def transition_many(
        self, items: Sequence[rules.BatchItem]
    ) -> list[Transition | TasksError]:
        """See ``SQLStore.transition_many``: the completions of claimed runs by one
        statement (:mod:`tasks_store_sql._pg_complete`), every other item — and every
        completion the statement did not write — by the transaction that decides in
        Python (:meth:`_transition_locked`). When that transaction fails after the
        statement wrote completions, its items get its ``StoreUnavailable`` and the
        written ones their results.

        Raises:
            StoreUnavailable: transient failure; nothing was written.
        """
        results: list[Transition | TasksError | None] = [None] * len(items)
        planned = _pg_complete.plan(items, self.decoded)
        if planned.kept:
            statement = self.complete
            args = statement.args(now=self._now_arg(), **planned.parameters())

            async def op(driver: Any) -> list[Any]:
                return list(await driver.fetch(statement.sql, *args))

            for task_id, committed_at in await self.db.run_driver(op, single_statement=True):
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
        locks, each item decided in Python (:mod:`tasks_store_sql._batch`), every changed
        row written once."""
        if not items:
            return []
        ids = sorted({item[0] for item in items})
        event_ids = sorted({item[2].event_id for item in items})

        async def op(driver: Any) -> list[Transition | TasksError]:
            loaded, now = await self._lock(driver, ids, event_ids)
            plan: Plan = decide(items, loaded, now or rules.tick(datetime.now(UTC)))
            await self._write(driver, plan.rows(loaded), plan.events, plan.members,
                              sorted(plan.wake), sorted(plan.cancelled))
            return plan.results

        return await self.db.run_driver(op)

    # -- creation ------------------------------------------------------------------------

    async def create(
        self, new: NewTask, replace: Snapshot | None, limits: StoreLimits
    ) -> Snapshot:
        """See ``SQLStore.create`` (without ``connection``)."""
        sql = self.sql

        async def taken(driver: Any) -> Loaded | None:
            found = await driver.fetchrow(sql.existing.sql, *sql.existing.args(id=new.id))
            return None if found is None else Loaded(*found)

        async def refuse(driver: Any, limit: str, now: datetime, checked: bool) -> None:
            """A taken id is refused before any capacity limit."""
            row = None if checked else await taken(driver)
            if row is not None:
                raise TaskExists(rules.present(row.snapshot, now))
            raise CapacityExceeded(limit)

        async def op(driver: Any) -> Snapshot:
            locked = await driver.fetchrow(
                sql.counter.sql, *sql.counter.args(now=self._now_arg(), id=new.id)
            )
            if locked is None:
                raise StoreError(MISSING_COUNTER)
            total, clock, seen = locked
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
                await driver.execute(sql.raise_bound.sql, *sql.raise_bound.args(name=scope))
            else:
                await driver.execute(sql.store_bound.sql,
                                     *sql.store_bound.args(name=scope, value=room.bound))
            snapshot = rules.new_snapshot(new, now, replace=current)
            members = _codec.member_rows(snapshot)
            if row is None:
                if not await self._insert(driver, snapshot, members):
                    row = await taken(driver)  # created since the lock statement began
                    assert row is not None
                    raise TaskExists(rules.present(row.snapshot, now))
            else:
                await driver.execute(sql.forget_events.sql, *sql.forget_events.args(id=new.id))
                await driver.execute(sql.forget_members.sql, *sql.forget_members.args(id=new.id))
                row.update(snapshot, None)
                await self._write(driver, [row], members=members, wake=[snapshot.queue])
            return snapshot

        return await self.db.run_driver(op)

    async def create_at_once(
        self, news: Sequence[NewTask], limits: StoreLimits
    ) -> list[Snapshot | None]:
        """``create`` of new tasks in one statement, its own transaction
        (:attr:`Statements.create`: one round trip, no ``BEGIN``/``COMMIT``); for each, the
        snapshot created, or ``None`` with nothing written for it when the statement cannot
        decide alone — its id is taken (or comes twice), the store would hold more than
        ``max_tasks`` tasks, or a tenant's bound leaves no room for its tasks of the group
        (it may be full: the transaction counts it; then none is created) — for the
        transaction that decides (:meth:`create`).

        Each snapshot is made in Python at a stand-in instant, its text cut where it
        spells that instant (and the TTL's expiry), and the statement spells in the clock
        it reads after the creators' lock: what is stored is exactly the snapshot made at
        that clock, which is returned.

        Raises:
            StoreUnavailable: transient failure; nothing was written.
        """
        made: dict[str, tuple[Snapshot, timedelta | None]] = {}
        rows: list[dict[str, Any]] = []
        members: list[dict[str, Any]] = []
        seen: set[str] = set()
        for new in news:
            if new.id in seen:  # an id that comes twice is tried once, for its first caller
                continue
            seen.add(new.id)
            stand_in = _stand_in()
            snapshot = rules.new_snapshot(new, stand_in)
            instants = {stand_in: (2, 0)}  # created_at, updated_at: no shift
            ttl = None
            if snapshot.expires_at is not None:
                ttl = snapshot.expires_at - stand_in
                instants[snapshot.expires_at] = (1, ttl // MILLISECOND)
            columns = _codec.projection(snapshot, None)
            cut = _codec.cut_at_instants(columns["snapshot"], instants)
            if cut is None:  # the user's values spell the stand-in: decide in a transaction
                continue
            made[new.id] = (snapshot, ttl)
            parts, shifts = cut
            rows.append({
                "n": len(rows), "id": new.id,
                **{name: columns[name] for name, _ in NEW_COLUMNS},
                "ttl": None if ttl is None else ttl // MILLISECOND,
                "pieces": list(zip(parts, [*shifts, None], strict=True)),
            })
            members += _codec.member_rows(snapshot)
        if not made:
            return [None] * len(news)
        statement = self.sql.create
        args = statement.args(now=self._now_arg(), most=limits.tasks_cap - len(made),
                              max_active=limits.scope_cap,
                              rows=_codec.encode(rows), members=_codec.encode(members))

        async def op(driver: Any) -> Any:
            return await driver.fetchrow(statement.sql, *args)

        ids, clock, *_ = await self.db.run_driver(op, single_statement=True)
        created: dict[str, Snapshot] = {}
        if ids:
            now = rules.tick(clock)
            for task_id in ids:
                snapshot, ttl = made[task_id]
                created[task_id] = snapshot.model_copy(update={
                    "created_at": now, "updated_at": now,
                    "expires_at": None if ttl is None else now + ttl,
                })
        outcomes: list[Snapshot | None] = []
        for new in news:
            outcomes.append(created.pop(new.id, None))  # a second caller of an id: None
        return outcomes

    async def _insert(
        self, driver: Any, snapshot: Snapshot, members: Sequence[dict[str, Any]]
    ) -> bool:
        """Insert ``snapshot``; ``False`` (nothing written) when its id is taken.

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
        if tuple(counts[:3]) != (1, 1, len(members)):
            raise StoreUnavailable("The creators' lock row is missing: nothing was written")
        return True

    # -- claims --------------------------------------------------------------------------

    async def claim_next(
        self, worker_id: str, lease_for: float, queues: Sequence[str], limit: int
    ) -> list[Claim]:
        """See ``SQLStore.claim_next`` (queues without ``exclusive``).

        One statement claims the oldest claimable tasks (:mod:`tasks_store_sql._pg_claim`: the
        rows locked, the clock read after the locks, ``rules.start_claim`` applied in SQL)
        and is its own transaction at READ COMMITTED: one round trip, no ``BEGIN``/
        ``COMMIT`` (on a connection whose default isolation is another, it runs in an
        explicit READ COMMITTED transaction). What it leaves alone — a task past its
        delivery limit (the claim fails it, writing a history entry), a row it cannot
        read — goes to :meth:`_claim_locked`, the claim decided in Python, which fails or
        skips such rows as ``rules`` says.
        """
        names = sorted(queues)
        claims, left_alone = await self._claim_statement(worker_id, lease_for, names, limit,
                                                         fresh=True)
        if left_alone and len(claims) < limit:  # candidates that were not new tasks
            more, left_alone = await self._claim_statement(
                worker_id, lease_for, names, limit - len(claims), fresh=False)
            claims += more
            if left_alone is None or (left_alone and len(claims) < limit):
                claims += await self._claim_locked(worker_id, lease_for, names,
                                                   limit - len(claims))
            claims.sort(key=lambda c: (c.snapshot.created_at, c.snapshot.id))
        return claims

    async def _claim_statement(
        self, worker_id: str, lease_for: float, names: list[str], limit: int, *,
        fresh: bool,
    ) -> tuple[list[Claim], bool | None]:
        """The claims one claim statement writes (``fresh``: the one that claims new
        tasks only) and whether it left a candidate alone (``None``: the statement
        failed on a record that is not JSON, before it wrote anything)."""
        one = len(names) == 1
        statement = self.claim_sql(one=one, fresh=fresh)
        args = statement.args(
            now=self._now_arg(),
            limit=limit,
            worker=worker_id,
            lease=rules.check_lease_for(lease_for) // MILLISECOND,
            tokens=join_list(rules.new_lease_tokens(limit)),
            **({"queue": names[0]} if one else {"queues": names}),
        )

        async def op(driver: Any) -> list[Any] | None:
            try:
                return list(await driver.fetch(statement.sql, *args))
            except UNREADABLE:  # a snapshot that is not JSON at all: nothing was written
                return None

        records = await self.db.run_driver(op, single_statement=True)
        if records is None:
            return [], None
        claims: list[Claim] = []
        left_alone = False
        for _, task_id, now, text, token, version in sorted(records):  # by rank
            if text is None:
                left_alone = True
                continue
            claim = self._claimed(task_id, now, text, token, version, worker_id)
            if claim is not None:
                claims.append(claim)
        return claims, left_alone

    def _claimed(
        self, task_id: str, now: datetime, text: str, token: str, version: int,
        worker_id: str,
    ) -> Claim | None:
        """The claim the claim statement wrote (``None``, logged, for a record that does
        not decode: it keeps the lease the statement gave it, and costs only itself). The
        decoded snapshot is kept, with the row's version, for the completion of this run
        (:mod:`tasks_store_sql._pg_complete`, else the lock that reads this text again)."""
        try:
            snapshot = _codec.decode_snapshot(task_id, text)
        except StoreCorrupt:
            log.warning("claim_next claimed task %r, whose record is corrupt; left to its "
                        "lease", task_id)
            return None
        self.decoded.keep(task_id, text, snapshot, version)
        claim = snapshot.claim
        assert claim is not None  # the statement wrote it
        lease = built(  # (the worker id was checked, the token made by the rules)
            Lease, task_id=task_id, worker_id=worker_id, token=token,
            generation=snapshot.lease_generation, expires_at=claim.expires_at)
        return Claim(rules.present(snapshot, rules.tick(now)), lease)

    async def _claim_locked(
        self, worker_id: str, lease_for: float, names: list[str], limit: int
    ) -> list[Claim]:
        """``claim_next`` decided in Python, in a transaction: candidates locked, each
        decoded and checked, claimed or failed past its delivery limit, corrupt records
        skipped (nothing written to them)."""

        failures: list[tuple[str, EventRecord]] = []  # past the delivery limit: failed

        async def op(driver: Any) -> list[Claim]:
            claims: list[Claim] = []
            changed: list[Loaded] = []
            failures.clear()
            skip: list[str] = []
            while len(claims) < limit:
                want = limit - len(claims)
                if len(names) == 1:
                    statement = self.sql.candidates_one
                    args = statement.args(now=self._now_arg(), queue=names[0], skip=skip,
                                          limit=want)
                else:
                    statement = self.sql.candidates_many
                    args = statement.args(now=self._now_arg(), queues=names, skip=skip,
                                          limit=want)
                records = await driver.fetch(statement.sql, *args)
                if not records:
                    break
                now = rules.tick(max(r[5] for r in records))
                for task_id, text, token, version, _, _ in sorted(
                    records, key=lambda r: (r[4], r[0])
                ):
                    skip.append(task_id)
                    row = Loaded(task_id, text, token, version)
                    snapshot = corrupt_or(row)
                    if snapshot is None:
                        reports.corrupt_skipped(log, task_id, "claim_next")
                        continue
                    if len(claims) >= limit or not rules.is_claimable(snapshot, now):
                        continue
                    claim = _start(row, snapshot, worker_id, lease_for, now, failures)
                    changed.append(row)
                    if claim is not None:
                        claims.append(claim)
                if len(records) < want:
                    break
            await self._write(driver, changed, failures)
            return claims

        claims = await self.db.run_driver(op)
        for task_id, record in failures:
            reports.delivery_limit(task_id, record)
        return claims

    async def claim(self, task_id: str, worker_id: str, lease_for: float) -> Claim:
        """See ``SQLStore.claim``."""

        failures: list[tuple[str, EventRecord]] = []  # past the delivery limit: failed

        async def op(driver: Any) -> Claim:
            failures.clear()
            loaded, now = await self._lock(driver, [task_id], [])
            row = loaded.get(task_id)
            if row is None or now is None:
                raise TaskNotFound(task_id)
            snapshot = row.snapshot
            rules.check_claimable(snapshot, now)
            claim = _start(row, snapshot, worker_id, lease_for, now, failures)
            await self._write(driver, [row], failures)
            if claim is None:
                raise CommitThenRaise(
                    Unavailable(f"The task exceeded {snapshot.work.max_deliveries} deliveries")
                )
            return claim

        try:
            return await self.db.run_driver(op)
        except Unavailable:
            for failed_id, record in failures:  # raised after the commit: written
                reports.delivery_limit(failed_id, record)
            raise

    # -- leases --------------------------------------------------------------------------

    async def _leased(self, driver: Any, lease: Lease) -> tuple[Loaded, Snapshot, datetime]:
        loaded, now = await self._lock(driver, [lease.task_id], [])
        row = loaded.get(lease.task_id)
        if row is None or now is None:
            raise LeaseLost()
        return row, row.snapshot, now

    async def renew(self, lease: Lease, lease_for: float) -> Claim:
        """See ``SQLStore.renew``."""

        async def op(driver: Any) -> Claim:
            row, snapshot, now = await self._leased(driver, lease)
            rules.check_lease(snapshot, row.token, lease, now)
            new, token, new_lease = rules.renew(snapshot, row.token, lease, lease_for, now)
            row.update(new, token)
            await self._write(driver, [row])
            return Claim(rules.present(new, now), new_lease)

        return await self.db.run_driver(op)

    async def report_progress(self, lease: Lease, value: float, message: str | None) -> Snapshot:
        """See ``SQLStore.report_progress``."""

        async def op(driver: Any) -> Snapshot:
            row, snapshot, now = await self._leased(driver, lease)
            rules.check_lease(snapshot, row.token, lease, now)
            new = rules.report_progress(snapshot, row.token, lease, value, message, now)
            if new is not snapshot:
                row.update(new, row.token)
                await self._write(driver, [row])
            return rules.present(new, now)

        return await self.db.run_driver(op)

    async def release(self, lease: Lease) -> Snapshot:
        """See ``SQLStore.release``."""

        async def op(driver: Any) -> Snapshot:
            row, snapshot, now = await self._leased(driver, lease)
            new = rules.release(snapshot, row.token, lease, now)
            row.update(new, row.token)
            await self._write(driver, [row], wake=[new.queue])
            return rules.present(new, now)

        return await self.db.run_driver(op)


_STAND_IN_FROM = datetime(1100, 1, 1, tzinfo=UTC)
_STAND_IN_SPAN_MS = 700 * 365 * 86_400_000


def _stand_in() -> datetime:
    """A random instant no store clock gives (between the years 1100 and 1800, whole
    milliseconds), for a snapshot whose instants the database puts in."""
    return _STAND_IN_FROM + timedelta(milliseconds=secrets.randbelow(_STAND_IN_SPAN_MS))


def _start(
    row: Loaded,
    snapshot: Snapshot,
    worker_id: str,
    lease_for: float,
    now: datetime,
    failures: list[tuple[str, EventRecord]],
) -> Claim | None:
    """Claim ``row`` (or fail it past its delivery limit, recording the failure)."""
    new, token, lease, failure = rules.start_claim(snapshot, worker_id, lease_for, now)
    if failure is not None:
        row.update(new, row.token)
        failures.append((row.id, failure))
        return None
    assert lease is not None
    row.update(new, token)
    return Claim(rules.present(new, now), lease)
