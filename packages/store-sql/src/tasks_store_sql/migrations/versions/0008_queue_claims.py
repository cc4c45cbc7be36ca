"""Fleet-wide queue limits: ``queue_claims``, the claim instants of rate-limited queues,
indexed ``(queue, claimed_at)`` (the count of a rate's window and the deletion of what no
window reaches are ranges of it). The ``queue:<name>`` lock rows of ``task_locks`` now
keep the longest window asked for in their ``value``: no change of schema.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tasks_store_sql._types import Ident, Instant
from tasks_store_sql.migrations import prefix

revision = "0008"
down_revision = "0007"

_NAME_BYTES = 256


def upgrade() -> None:
    """Create ``queue_claims`` and its index (empty: no claim was logged before)."""
    p = prefix(op)
    op.create_table(
        f"{p}queue_claims",
        sa.Column("queue", Ident(_NAME_BYTES), nullable=False),
        sa.Column("claimed_at", Instant(), nullable=False),
        mysql_charset="utf8mb4",
        mysql_engine="InnoDB",
    )
    op.create_index(f"{p}ix_queue_claims", f"{p}queue_claims", ["queue", "claimed_at"])


def downgrade() -> None:
    """Drop ``queue_claims`` (code of revision 0007 keeps no rates)."""
    p = prefix(op)
    op.drop_index(f"{p}ix_queue_claims", table_name=f"{p}queue_claims")
    op.drop_table(f"{p}queue_claims")
