"""The available instant: ``available_at`` (``rules.available_at`` — a retry's
``retry_at``, a delayed task's ``run_at``, else the creation) and ``run_at`` columns, and
the claim index re-keyed to claim order ``(queue, status, available_at, id)`` over every
unleased pending task (due retries and delayed tasks included), which makes the retry
index unread: it is dropped. :func:`upgrade` backfills and says what SQLite keeps.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tasks_store_sql._types import Instant
from tasks_store_sql.migrations import prefix

revision = "0006"
down_revision = "0005"

_SQLITE_FILL = "1970-01-01 00:00:00.000000"
"""SQLite adds a NOT NULL column only with a default: this one, overwritten at once."""


def _constant(value: str) -> sa.ColumnElement[str]:
    quoted = sa.literal(value, sa.String).compile(compile_kwargs={"literal_binds": True})
    return sa.literal_column(str(quoted), sa.String)


def _pending() -> sa.ColumnElement[bool]:
    return sa.column("status") == _constant("pending")


def _partial() -> bool:
    return op.get_bind().dialect.name in ("postgresql", "sqlite")


def _index(name: str, columns: list[str], where: sa.ColumnElement[bool]) -> None:
    p = prefix(op)
    kept = where if _partial() else None
    op.create_index(f"{p}{name}", f"{p}tasks", columns,
                    postgresql_where=kept, sqlite_where=kept)


def upgrade() -> None:
    """Add ``run_at`` (no stored task was delayed: ``NULL``) and ``available_at``, filled
    from ``COALESCE(retry_at, created_at)`` — what ``rules.available_at`` gives a task
    without ``run_at`` — then ``NOT NULL``: a process still running code from before this
    revision writes no ``available_at`` and its writes fail (PostgreSQL, MariaDB). SQLite
    cannot make a column ``NOT NULL`` without rebuilding the table: there the column is
    added with a constant default that every write of this code overrides.

    The claim index becomes ``(queue, status, available_at, id)`` over pending tasks
    without a lease (no longer only those without a retry pending), the retry index goes
    (MariaDB indexes every row: there only the columns change)."""
    p = prefix(op)
    table = f"{p}tasks"
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.add_column(table, sa.Column("run_at", Instant(), nullable=True))
    op.add_column(table, sa.Column(
        "available_at", Instant(), nullable=not sqlite,
        server_default=_SQLITE_FILL if sqlite else None))
    tasks = sa.table(table, sa.column("retry_at"), sa.column("created_at"),
                     sa.column("available_at"))
    op.execute(sa.update(tasks).values(
        available_at=sa.func.coalesce(tasks.c.retry_at, tasks.c.created_at)))
    if not sqlite:
        op.alter_column(table, "available_at", existing_type=Instant(), nullable=False)
    op.drop_index(f"{p}ix_tasks_claim", table_name=table)
    op.drop_index(f"{p}ix_tasks_retry", table_name=table)
    _index("ix_tasks_claim", ["queue", "status", "available_at", "id"],
           sa.and_(_pending(), sa.column("claim_expires_at").is_(None)))


def downgrade() -> None:
    """Put back the claim index of revision 0005 and the retry index, drop the columns
    (a delayed task's ``run_at`` stays in its stored text only)."""
    p = prefix(op)
    table = f"{p}tasks"
    op.drop_index(f"{p}ix_tasks_claim", table_name=table)
    _index("ix_tasks_claim", ["queue", "status", "created_at", "id"],
           sa.and_(_pending(), sa.column("claim_expires_at").is_(None),
                   sa.column("retry_at").is_(None)))
    _index("ix_tasks_retry", ["queue", "retry_at"], sa.column("retry_at").is_not(None))
    op.drop_column(table, "available_at")
    op.drop_column(table, "run_at")
