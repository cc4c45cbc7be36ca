"""Counts and listings by status: the counts index ``(tenant, queue, status)`` over every
task (``counts`` reads it alone; PostgreSQL stores each run of equal keys once) and the
status index ``(status, id)`` over the tasks waiting for input, failed or cancelled (the
statuses a listing by status cannot find densely in id order). No data moves.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tasks_store_sql.migrations import prefix

revision = "0009"
down_revision = "0008"

_LISTED = ("waiting_input", "failed", "cancelled")


def _constant(value: str) -> sa.ColumnElement[str]:
    quoted = sa.literal(value, sa.String).compile(compile_kwargs={"literal_binds": True})
    return sa.literal_column(str(quoted), sa.String)


def upgrade() -> None:
    """Create both indexes (MariaDB, which has no partial indexes, indexes every row in
    the status index)."""
    p = prefix(op)
    table = f"{p}tasks"
    op.create_index(f"{p}ix_tasks_counts", table, ["tenant", "queue", "status"])
    partial = op.get_bind().dialect.name in ("postgresql", "sqlite")
    where = sa.column("status").in_([_constant(s) for s in _LISTED]) if partial else None
    op.create_index(f"{p}ix_tasks_status", table, ["status", "id"],
                    postgresql_where=where, sqlite_where=where)


def downgrade() -> None:
    """Drop both (code of revision 0008 counts pages of ``list``)."""
    p = prefix(op)
    table = f"{p}tasks"
    op.drop_index(f"{p}ix_tasks_status", table_name=table)
    op.drop_index(f"{p}ix_tasks_counts", table_name=table)
