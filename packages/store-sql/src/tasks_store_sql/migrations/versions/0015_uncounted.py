"""Creates count nothing until a store with a capacity limit needs the count: the
creators' row (renamed ``creators`` → ``task_count``) set to ``UNCOUNTED`` and the
tenants' bounds deleted (``_schema.UNCOUNTED``).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tasks_store_sql.migrations import prefix

revision = "0015"
down_revision = "0014"

_UNCOUNTED = -1  # (as _schema.UNCOUNTED: a migration keeps the value it was written with)


def _locks() -> sa.TableClause:
    return sa.table(f"{prefix(op)}task_locks", sa.column("name", sa.String),
                    sa.column("value", sa.BigInteger))


def upgrade() -> None:
    """Make the namespace uncounted: delete the bounds, rename the creators' row and set
    it to ``UNCOUNTED``.

    Code from before this revision reads the row's value as the count and adds to it: it
    would take ``-1`` for a count and keep a wrong one that a limit then trusts. Such code
    refuses to open a namespace at this revision, and the rename stops the processes that
    were already running when it was applied: their creates find no creators' row and
    fail (``The creators' lock row is missing``) instead of passing a limit."""
    locks = _locks()
    op.execute(sa.delete(locks).where(locks.c.name.startswith("scope:", autoescape=True)))
    op.execute(sa.update(locks).where(locks.c.name == "creators")
               .values(name="task_count", value=_UNCOUNTED))


def downgrade() -> None:
    """Count the stored tasks into the row and rename it back (which stops the creates of
    processes running this revision the same way); the bounds are left to be counted
    when a limit needs them, as after revision 0005's upgrade."""
    locks = _locks()
    tasks = sa.table(f"{prefix(op)}tasks", sa.column("id"))
    stored = sa.select(sa.func.count()).select_from(tasks).scalar_subquery()
    op.execute(sa.delete(locks).where(locks.c.name.startswith("scope:", autoescape=True)))
    op.execute(sa.update(locks).where(locks.c.name == "task_count")
               .values(name="creators", value=stored))
