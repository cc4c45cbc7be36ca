"""Lock rows: the creators' lock (counting stored tasks) and exclusive-queue locks.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tasks_store_sql._types import Ident
from tasks_store_sql.migrations import prefix

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    p = prefix(op)
    locks = op.create_table(
        f"{p}task_locks",
        sa.Column("name", Ident(272), primary_key=True),
        sa.Column("value", sa.BigInteger, nullable=False),
        mysql_charset="utf8mb4",
        mysql_engine="InnoDB",
    )
    # Backfill: the creators' row counts the tasks already stored.
    tasks = sa.table(f"{p}tasks", sa.column("id"))
    count = op.get_bind().execute(sa.select(sa.func.count()).select_from(tasks)).scalar_one()
    op.bulk_insert(locks, [{"name": "tasks", "value": count}])


def downgrade() -> None:
    op.drop_table(f"{prefix(op)}task_locks")
