"""PostgreSQL's completion of a claimed run as one statement: ``rules.apply_event`` of a
``completed`` event in SQL, the row standing for its history record (``final_event``).

It applies a ``completed`` event only to a row that is still exactly what the run's claim
returned (the same ``row_version``), under the lease's token, alive by the store clock
read after the lock, with no history entry of that event id: then the rules' outcome is
``applied`` at ``max(clock, updated_at + 1 ms)``. Anything else is left to the
transaction that decides in Python. It writes the head's columns only, never the body
(:func:`completion_statement`); ``test_pg_complete.py`` holds every column to
``_codec.projection`` of what ``rules.apply_event`` decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from tasks_core import rules
from tasks_core.events import Completed, EventRecord
from tasks_core.models import Lease, Snapshot, TaskStatus

from tasks_store_sql._codec import Decoded, Kept
from tasks_store_sql._schema import Tables
from tasks_store_sql._stored import ENDED, RECOVERED, json_text
from tasks_store_sql.postgres._statements import (
    SEPARATOR,
    Statement,
    join_list,
    joined,
    later,
    store_clock,
)

__all__ = ["Completions", "completion_statement", "plan"]

COLUMNS: tuple[tuple[str, sa.types.TypeEngine[Any]], ...] = (
    ("id", sa.Text()), ("version", sa.BigInteger()), ("token", sa.Text()),
    ("event_id", sa.Text()), ("revision", sa.Integer()), ("result", sa.Text()),
    ("ttl_end", postgresql.TIMESTAMP(timezone=True)), ("retention", sa.BigInteger()),
)
"""One list parameter per column (:func:`tasks_store_sql.postgres._statements.joined`), one
element per completion."""
NULLABLE = frozenset({"result", "ttl_end", "retention"})
"""The columns whose elements may be ``None``."""


@dataclass
class Completions:
    """The completions of a batch that the statement may write, by task id, and the
    elements of the statement's list parameters (one list per :data:`COLUMNS`, in order).
    """

    kept: dict[str, tuple[int, Kept, Completed]] = field(default_factory=dict)
    columns: tuple[list[Any], ...] = field(
        default_factory=lambda: tuple([] for _ in COLUMNS)
    )

    def parameters(self) -> dict[str, str]:
        """The statement's parameters (``ids``, ``versions``…): each of :attr:`columns`
        joined into one text."""
        return {f"{name}s": join_list(values)
                for (name, _), values in zip(COLUMNS, self.columns, strict=True)}

    def add(self, index: int, kept: Kept, event: Completed, lease: Lease) -> bool:
        """Plan ``event`` (item ``index``) on the run ``kept`` holds; ``False`` (nothing
        planned) where the statement cannot decide it."""
        snapshot, version = kept.snapshot, kept.row_version
        claim = snapshot.claim
        if (
            version is None
            or claim is None
            or claim.ended
            or lease.task_id != snapshot.id
            or lease.generation != claim.generation
            or lease.worker_id != claim.worker_id
        ):
            return False
        result = None if event.result is None else json_text(event.result)
        if SEPARATOR in lease.token:
            return False  # (JSON text, task and event ids never hold the separator)
        ttl_end = rules.ttl_end(snapshot)
        retention = None
        if snapshot.retention_s is not None:
            retention = round(snapshot.retention_s * 1000)
        self.kept[snapshot.id] = (index, kept, event)
        for column, value in zip(self.columns, (  # in the order of COLUMNS
            snapshot.id, version, lease.token, event.event_id, snapshot.revision + 1, result,
            ttl_end, retention,
        ), strict=True):
            column.append(value)
        return True

    def applied(
        self, task_id: str, committed_at: datetime
    ) -> tuple[int, tuple[Snapshot, EventRecord]]:
        """The item index and what ``rules.apply_event`` decides for the completion of
        ``task_id`` that the statement wrote at ``committed_at`` — what it stored."""
        index, kept, event = self.kept[task_id]
        applied = rules.apply_event(kept.snapshot, event, committed_at)
        assert applied is not None  # the task had not finished
        return index, applied


def plan(items: Sequence[rules.BatchItem], decoded: Decoded) -> Completions:
    """The items of a batch the statement may write: ``completed`` events sent with a
    lease for a run whose claim the store keeps, one per task (a task named twice is
    decided in Python, in order)."""
    planned = Completions()
    named: dict[str, int] = {}
    for task_id, _, _, _ in items:
        named[task_id] = named.get(task_id, 0) + 1
    for index, (task_id, expected_revision, event, authority) in enumerate(items):
        if not (isinstance(event, Completed) and isinstance(authority, Lease)):
            continue
        if named[task_id] > 1:
            continue
        kept = decoded.peek(task_id)  # a finished or waiting task fails the head's check
        if kept is None or kept.snapshot.revision != expected_revision:
            continue
        planned.add(index, kept, event, authority)
    return planned


def completion_statement(tables: Tables) -> Statement:
    """The completions of the lists :data:`COLUMNS` (see the module docstring);
    parameter ``now`` as every statement of the hot path. Its own transaction, one round
    trip: a group commit of completions costs one statement, no snapshot encoded.

    A completion is planned (:func:`plan`) when the store still holds what the run's
    claim returned (:class:`tasks_store_sql._codec.Kept`: what was stored, its snapshot
    and the ``row_version``). Everything ``rules.decide_transition`` checks follows from
    the statement's conditions and the kept snapshot (task, generation and worker of the
    lease, the revision, a task not finished). A stale or expired lease, a write since the
    claim or an event id seen before is written by nothing here and goes to the
    transaction, which refuses or replays as before.

    It writes what ``rules.apply_event`` writes for a ``completed`` event: the status,
    revision and result; the claim ended at ``min(expiry, commit)`` (``held`` dropped,
    ``recovered`` kept); no retry, no input requests; ``updated_at`` and ``finished_at``
    the commit instant; the expiry ``min(ttl_end, commit + retention)``
    (``rules.ttl_end``: the TTL counts from ``run_at``, else the creation). The row's
    ``final_event`` is the event's id: the row stands for its record
    (``_codec.final_record``, which gives back exactly what ``rules.apply_event``
    records for a ``completed`` event).

    Returns one row per completion written: ``id`` and its ``committed_at``.
    """
    t, ev = tables.tasks, tables.events
    lists = {name: joined(f"{name}s", type_, nullable=name in NULLABLE)
             for name, type_ in COLUMNS}
    items = sa.func.unnest(*lists.values()).table_valued(
        *(name for name, _ in COLUMNS)).render_derived()
    locked = (
        sa.select(t.c.id, t.c.row_version, t.c.claim_token, t.c.claim_expires_at,
                  t.c.updated_at)
        .where(t.c.id == sa.any_(lists["id"]))
        .order_by(t.c.id)
        .with_for_update()
        .subquery("l")
    )
    clocked = sa.select(locked, store_clock().label("now")).cte("k").prefix_with(
        "MATERIALIZED")  # the clock is read in the projection over each locked row
    one = sa.literal(1, sa.BigInteger)
    at = sa.func.greatest(
        sa.func.date_trunc(sa.bindparam("unit", "milliseconds", type_=sa.Text), clocked.c.now),
        later(clocked.c.updated_at, one),
    )
    seen = sa.exists(
        sa.select(ev.c.event_id).where(ev.c.task_id == items.c.id,
                                       ev.c.event_id == items.c.event_id)
    )
    decided = (
        sa.select(items, at.label("at"))
        .select_from(clocked.join(items, items.c.id == clocked.c.id))
        .where(
            clocked.c.row_version == items.c.version,
            clocked.c.claim_token == items.c.token,
            clocked.c.claim_expires_at > clocked.c.now,
            ~seen,
        )
        .cte("d")
        .prefix_with("MATERIALIZED")
    )
    kept = sa.bindparam("recovered_bit", RECOVERED, type_=sa.SmallInteger)
    ended = sa.bindparam("ended_bit", ENDED, type_=sa.SmallInteger)
    written = (
        sa.update(t)
        .where(t.c.id == decided.c.id, t.c.row_version == decided.c.version)
        .values(
            row_version=t.c.row_version + 1,
            status=sa.bindparam("completed", TaskStatus.COMPLETED.value, type_=sa.Text),
            revision=decided.c.revision,
            result=decided.c.result,
            claim_expires_at=sa.null(),
            claim_until=sa.func.least(t.c.claim_until, decided.c.at),
            claim_flags=t.c.claim_flags.op("&")(kept).op("|")(ended),
            retry_at=sa.null(),
            input_requests=sa.null(),
            updated_at=decided.c.at,
            finished_at=decided.c.at,
            expires_at=sa.func.least(decided.c.ttl_end, later(decided.c.at, decided.c.retention)),
            final_event=decided.c.event_id,
        )
        .returning(t.c.id, t.c.updated_at)
    )
    return Statement.of(written)
