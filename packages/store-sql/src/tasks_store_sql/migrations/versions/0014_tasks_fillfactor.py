"""PostgreSQL: the ``tasks`` table's pages filled half at insert (``fillfactor = 50``),
so the versions a claim and a completion write find room on their row's page, where the
dead ones are pruned, instead of extending the table. Pages written before keep what they
hold; every page written after follows it. Other dialects: nothing.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tasks_store_sql.migrations import prefix

revision = "0014"
down_revision = "0013"


def _alter(action: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    table = sa.Table(f"{prefix(op)}tasks", sa.MetaData())
    ddl = sa.DDL(f"ALTER TABLE %(fullname)s {action}")  # type: ignore[no-untyped-call]
    op.execute(ddl.against(table))  # (the name quoted by the dialect)


def upgrade() -> None:
    """Set the fill factor (PostgreSQL)."""
    _alter("SET (fillfactor = 50)")


def downgrade() -> None:
    """Reset it to PostgreSQL's default (PostgreSQL)."""
    _alter("RESET (fillfactor)")
