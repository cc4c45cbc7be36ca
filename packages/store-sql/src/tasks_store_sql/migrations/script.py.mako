"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
"""

from __future__ import annotations

from alembic import op

from tasks_store_sql.migrations import prefix

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}


def upgrade() -> None:
    p = prefix(op)


def downgrade() -> None:
    p = prefix(op)
