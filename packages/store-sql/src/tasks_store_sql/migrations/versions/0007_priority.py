"""Priorities: ``neg_priority``, minus the task's priority (0 for every task stored
before it), the claim index re-keyed to claim order ``(queue, status, neg_priority,
available_at, id)`` — every key ascending — and the waiting index ``(queue,
available_at)`` over retries and delayed tasks, which ``next_available`` reads
(:func:`upgrade` says why, and what MariaDB keeps).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op
from tasks_store_sql.migrations import prefix

revision = "0007"
down_revision = "0006"


def _constant(value: str) -> sa.ColumnElement[str]:
    quoted = sa.literal(value, sa.String).compile(compile_kwargs={"literal_binds": True})
    return sa.literal_column(str(quoted), sa.String)


def _unclaimed() -> sa.ColumnElement[bool]:
    return sa.and_(sa.column("status") == _constant("pending"),
                   sa.column("claim_expires_at").is_(None))


def _index(name: str, columns: list[str], where: sa.ColumnElement[bool]) -> None:
    p = prefix(op)
    kept = where if op.get_bind().dialect.name in ("postgresql", "sqlite") else None
    op.create_index(f"{p}{name}", f"{p}tasks", columns,
                    postgresql_where=kept, sqlite_where=kept)


def _backfill(table: str) -> None:
    """Give ``neg_priority`` to the stored tasks whose text spells a priority (code from
    before this revision stored it in the text only): each read in Python, a record
    without a priority from -100 to 100 at its top level left at 0."""
    tasks = sa.table(table, sa.column("id", sa.String), sa.column("snapshot", sa.Text),
                     sa.column("neg_priority", sa.SmallInteger))
    bind = op.get_bind()
    found = bind.execute(sa.select(tasks.c.id, tasks.c.snapshot).where(
        tasks.c.snapshot.contains('"priority":', autoescape=True))).all()
    for task_id, text in found:
        try:
            priority = json.loads(text).get("priority")
        except (ValueError, AttributeError):
            continue
        if type(priority) is int and priority and -100 <= priority <= 100:
            bind.execute(sa.update(tasks).where(tasks.c.id == task_id)
                         .values(neg_priority=-priority))


def upgrade() -> None:
    """Add ``neg_priority SMALLINT NOT NULL DEFAULT 0`` (the default gives a process still
    running code from before this revision priority 0 — what it served by), backfilled
    from the text of tasks that spell a priority.

    *Why minus the priority:* claim order is the highest priority first, then the
    earliest available instant; with minus the priority every key of the claim index is
    ascending, and an ascending read of it is claim order on every dialect — MariaDB
    before 10.8 ignores ``DESC`` in an index, and would sort every pending task of a queue
    instead. The claim index leads with it after queue and status.

    *The waiting index:* with the priority ahead of ``available_at`` in the claim index,
    the earliest ``available_at`` past ``now`` of a queue is no longer one range of it
    (one per priority), so ``next_available`` reads ``(queue, available_at)`` over the
    unleased pending tasks that can wait at all — a retry pending or a delayed task:
    fresh tasks, most of the table's writes, never enter it. MariaDB has no partial
    indexes: there it holds every row (the tasks past ``now`` are waiting ones)."""
    p = prefix(op)
    table = f"{p}tasks"
    op.add_column(table, sa.Column("neg_priority", sa.SmallInteger(), nullable=False,
                                   server_default="0"))
    _backfill(table)
    op.drop_index(f"{p}ix_tasks_claim", table_name=table)
    _index("ix_tasks_claim", ["queue", "status", "neg_priority", "available_at", "id"],
           _unclaimed())
    _index("ix_tasks_waiting", ["queue", "available_at"],
           sa.and_(_unclaimed(), sa.or_(sa.column("retry_at").is_not(None),
                                        sa.column("run_at").is_not(None))))


def downgrade() -> None:
    """Put back the claim index of revision 0006, drop the waiting index and the column (a
    task's priority stays in its stored text only)."""
    p = prefix(op)
    table = f"{p}tasks"
    op.drop_index(f"{p}ix_tasks_waiting", table_name=table)
    op.drop_index(f"{p}ix_tasks_claim", table_name=table)
    _index("ix_tasks_claim", ["queue", "status", "available_at", "id"], _unclaimed())
    op.drop_column(table, "neg_priority")
