"""Bounds on each tenant's active tasks, kept in ``task_locks`` rows ``scope:<tenant>``
(:mod:`tasks_store_sql._scopes`), so that a create counts a tenant's active tasks only
when the bound says it may be full — and the creators' row renamed from ``tasks`` to
``creators``, which stops creates by code from before this revision (:func:`upgrade`).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tasks_store_sql.migrations import prefix

revision = "0005"
down_revision = "0004"


def _locks() -> sa.TableClause:
    return sa.table(f"{prefix(op)}task_locks", sa.column("name", sa.String))


def upgrade() -> None:
    """Rename the creators' row from ``tasks`` to ``creators``.

    Every create must keep the bounds: one that does not (code from before this
    revision) leaves a bound too low, and a later create trusts it past the limit. Such
    code refuses to open a namespace at this revision, and the rename stops the processes
    that were already running when it was applied: they find no creators' row, and their
    creates fail (``The creators' lock row is missing``) instead of passing a limit."""
    locks = _locks()
    op.execute(sa.update(locks).where(locks.c.name == "tasks").values(name="creators"))


def downgrade() -> None:
    """Delete the bounds and rename the row back, which stops the creates of processes
    running this revision the same way, so that an upgrade later starts without stale
    bounds."""
    locks = _locks()
    op.execute(sa.delete(locks).where(locks.c.name.startswith("scope:", autoescape=True)))
    op.execute(sa.update(locks).where(locks.c.name == "creators").values(name="tasks"))
