"""Bounds on each tenant's active tasks, kept in ``task_locks`` rows ``scope:<tenant>``
(:mod:`tasks_store_sql._scopes`), so that a create counts a tenant's active tasks only
when the bound says it may be full.

The upgrade changes no table: the rows appear as creates need them. It exists so that
code which does not keep the bounds (every release before it) refuses to open a namespace
that code keeping them uses — a create by such code would leave a bound too low. The
downgrade deletes the rows, so that an upgrade after creates by the older code starts
without stale bounds.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tasks_store_sql.migrations import prefix

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    pass


def downgrade() -> None:
    locks = sa.table(f"{prefix(op)}task_locks", sa.column("name", sa.String))
    op.execute(sa.delete(locks).where(locks.c.name.startswith("scope:", autoescape=True)))
