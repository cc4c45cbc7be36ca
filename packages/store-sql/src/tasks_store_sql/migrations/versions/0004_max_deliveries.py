"""A task's delivery limit in its own column, for PostgreSQL's one-statement claim, which
then reads no more of the stored JSON than the keys it rewrites (``postgres/_claim_sql.py``).

Rows stored before have none (``NULL``): the claim statement leaves such a row to the
claim decided in Python, whose write fills the column in. Nothing is backfilled, so the
upgrade is instant on any table; the downgrade drops the column.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tasks_store_sql.migrations import prefix

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.add_column(f"{prefix(op)}tasks", sa.Column("max_deliveries", sa.Integer, nullable=True))


def downgrade() -> None:
    op.drop_column(f"{prefix(op)}tasks", "max_deliveries")
