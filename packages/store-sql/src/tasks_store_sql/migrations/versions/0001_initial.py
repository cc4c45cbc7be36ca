"""Tasks, their events and their members.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tasks_store_sql._types import Document, Ident, Instant
from tasks_store_sql.migrations import prefix

revision = "0001"
down_revision = None

def upgrade() -> None:
    p = prefix(op)
    op.create_table(
        f"{p}tasks",
        sa.Column("id", Ident(1024), primary_key=True),
        sa.Column("tenant", Ident(256), nullable=False),
        sa.Column("queue", Ident(256), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("row_version", sa.Integer, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("claim_token", sa.String(256), nullable=True),
        sa.Column("claim_generation", sa.Integer, nullable=True),
        sa.Column("claim_expires_at", Instant(), nullable=True),
        sa.Column("retry_at", Instant(), nullable=True),
        sa.Column("created_at", Instant(), nullable=False),
        sa.Column("updated_at", Instant(), nullable=False),
        sa.Column("expires_at", Instant(), nullable=True),
        sa.Column("snapshot", Document(), nullable=False),
        mysql_charset="utf8mb4",
        mysql_engine="InnoDB",
    )
    op.create_index(f"{p}ix_tasks_claim", f"{p}tasks", ["queue", "status", "created_at", "id"])
    op.create_index(f"{p}ix_tasks_lease", f"{p}tasks", ["queue", "claim_expires_at"])
    op.create_index(f"{p}ix_tasks_retry", f"{p}tasks", ["status", "retry_at"])
    op.create_index(f"{p}ix_tasks_expires", f"{p}tasks", ["expires_at"])
    op.create_index(f"{p}ix_tasks_tenant", f"{p}tasks", ["tenant", "id"])
    op.create_index(f"{p}ix_tasks_active", f"{p}tasks", ["tenant", "status", "expires_at"])
    op.create_table(
        f"{p}task_events",
        sa.Column("task_id", Ident(1024), primary_key=True),
        sa.Column("event_id", Ident(256), primary_key=True),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("committed_at", Instant(), nullable=False),
        sa.Column("record", Document(), nullable=False),
        sa.UniqueConstraint("task_id", "revision", name=f"{p}uq_task_events_revision"),
        mysql_charset="utf8mb4",
        mysql_engine="InnoDB",
    )
    op.create_table(
        f"{p}task_members",
        sa.Column("tenant", Ident(256), primary_key=True),
        sa.Column("user_id", Ident(256), primary_key=True),
        sa.Column("task_id", Ident(1024), primary_key=True),
        sa.Column("role", sa.String(8), nullable=False),
        mysql_charset="utf8mb4",
        mysql_engine="InnoDB",
    )
    op.create_index(f"{p}ix_task_members_task", f"{p}task_members", ["task_id"])


def downgrade() -> None:
    p = prefix(op)
    op.drop_table(f"{p}task_members")
    op.drop_table(f"{p}task_events")
    op.drop_table(f"{p}tasks")
