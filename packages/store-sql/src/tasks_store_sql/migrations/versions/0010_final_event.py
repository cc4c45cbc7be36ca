"""The completion's record in the row: ``tasks.final_event``, the id of the ``completed``
event that finished the run, whose history record the row stands for (the store derives
it from the snapshot: ``_codec.final_record``) — no ``task_events`` row of its own.

The upgrade moves the stored completions there; the downgrade writes them back as
history rows. Both check each record against the snapshot in plain JSON (this file keeps
no code of the store's): a record the row would not give back exactly stays a row.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op
from tasks_store_sql._types import Document, Ident, Instant
from tasks_store_sql.migrations import batches, prefix

revision = "0010"
down_revision = "0009"

_RECORD_KEYS = {"event", "revision", "committed_at", "status", "retry_at", "error",
                "accepted"}


def _tables() -> tuple[sa.TableClause, sa.TableClause]:
    p = prefix(op)
    tasks = sa.table(f"{p}tasks", sa.column("id", Ident(1024)),
                     sa.column("status", sa.String(16)), sa.column("revision", sa.Integer),
                     sa.column("snapshot", Document()), sa.column("final_event", Ident(256)),
                     sa.column("updated_at", Instant()))
    events = sa.table(f"{p}task_events", sa.column("task_id", Ident(1024)),
                      sa.column("event_id", Ident(256)), sa.column("revision", sa.Integer),
                      sa.column("kind", sa.String(32)), sa.column("committed_at", Instant()),
                      sa.column("record", Document()))
    return tasks, events


def _record(event_id: str, revision: int, snapshot: dict[str, Any]) -> dict[str, Any]:
    """The record of the ``completed`` event ``event_id`` as the store derives it from a
    completed task's snapshot (and as it spells a stored record)."""
    return {"event": {"event_id": event_id, "kind": "completed",
                      "result": snapshot.get("result")},
            "revision": revision, "committed_at": snapshot.get("finished_at"),
            "status": "completed", "retry_at": None, "error": None, "accepted": None}


def upgrade() -> None:
    """Add the column; move each completed task's last history record into it when the
    snapshot gives that record back (same event, revision, result and commit instant)."""
    p = prefix(op)
    op.add_column(f"{p}tasks", sa.Column("final_event", Ident(256), nullable=True))
    tasks, events = _tables()
    bind = op.get_bind()
    found = (sa.select(tasks.c.id, events.c.event_id, tasks.c.revision, tasks.c.snapshot,
                       events.c.record)
             .select_from(tasks.join(events, sa.and_(events.c.task_id == tasks.c.id,
                                                     events.c.revision == tasks.c.revision)))
             .where(tasks.c.status == "completed", events.c.kind == "completed"))
    for rows in batches(op, found):
        moved = []
        for task_id, event_id, revision_, text, record in rows:
            try:
                kept = json.loads(record)
                derived = _record(event_id, revision_, json.loads(text))
            except ValueError:
                continue
            if isinstance(kept, dict) and {**dict.fromkeys(_RECORD_KEYS), **kept} == derived:
                moved.append({"b_id": task_id, "b_event": event_id})
        if moved:
            bind.execute(sa.update(tasks).where(tasks.c.id == sa.bindparam("b_id"))
                         .values(final_event=sa.bindparam("b_event")), moved)
            bind.execute(sa.delete(events).where(
                events.c.task_id == sa.bindparam("b_id"),
                events.c.event_id == sa.bindparam("b_event")), moved)


def downgrade() -> None:
    """Write each row's final record back as a history row (committed at the task's
    ``updated_at``, which a finished task keeps), then drop the column."""
    p = prefix(op)
    tasks, events = _tables()
    bind = op.get_bind()
    with_final = sa.select(tasks.c.id, tasks.c.final_event, tasks.c.revision,
                           tasks.c.snapshot, tasks.c.updated_at).where(
        tasks.c.final_event.is_not(None))
    for rows in batches(op, with_final):
        bind.execute(sa.insert(events), [
            {"task_id": task_id, "event_id": event_id, "revision": revision_,
             "kind": "completed", "committed_at": updated_at,
             "record": json.dumps(_record(event_id, revision_, json.loads(text)),
                                  separators=(",", ":"))}
            for task_id, event_id, revision_, text, updated_at in rows
        ])
    op.drop_column(f"{p}tasks", "final_event")
