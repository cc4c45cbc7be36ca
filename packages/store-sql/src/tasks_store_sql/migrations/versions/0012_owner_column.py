"""The owner in the task's row: ``tasks.owner`` (the owner's user id; its tenant is the
task's) with the owner index ``(tenant, owner, id)`` over owned tasks, instead of a
``task_members`` row with role ``owner`` — ``task_members`` keeps the watchers.

The upgrade moves each owner row into its task's column; the downgrade writes them back.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tasks_store_sql._types import Ident
from tasks_store_sql.migrations import prefix

revision = "0012"
down_revision = "0011"


def _tables() -> tuple[sa.TableClause, sa.TableClause]:
    p = prefix(op)
    tasks = sa.table(f"{p}tasks", sa.column("id", Ident(1024)),
                     sa.column("tenant", Ident(256)), sa.column("owner", Ident(256)))
    members = sa.table(f"{p}task_members", sa.column("tenant", Ident(256)),
                       sa.column("user_id", Ident(256)), sa.column("task_id", Ident(1024)),
                       sa.column("role", sa.String(8)))
    return tasks, members


def upgrade() -> None:
    """Add the column and its index (partial, owned tasks only, where the dialect has
    partial indexes), fill it from the owner rows, delete them."""
    p = prefix(op)
    table = f"{p}tasks"
    op.add_column(table, sa.Column("owner", Ident(256), nullable=True))
    tasks, members = _tables()
    owner_of = (sa.select(members.c.user_id)
                .where(members.c.task_id == tasks.c.id, members.c.tenant == tasks.c.tenant,
                       members.c.role == "owner")
                .scalar_subquery())
    bind = op.get_bind()
    bind.execute(sa.update(tasks).values(owner=owner_of))
    bind.execute(sa.delete(members).where(members.c.role == "owner"))
    partial = bind.dialect.name in ("postgresql", "sqlite")
    where = sa.column("owner").is_not(None) if partial else None
    op.create_index(f"{p}ix_tasks_owner", table, ["tenant", "owner", "id"],
                    postgresql_where=where, sqlite_where=where)


def downgrade() -> None:
    """Write an owner row for each owned task, then drop the index and the column."""
    p = prefix(op)
    table = f"{p}tasks"
    tasks, members = _tables()
    op.get_bind().execute(sa.insert(members).from_select(
        ["tenant", "user_id", "task_id", "role"],
        sa.select(tasks.c.tenant, tasks.c.owner, tasks.c.id,
                  sa.literal("owner", sa.String(8))).where(tasks.c.owner.is_not(None))))
    op.drop_index(f"{p}ix_tasks_owner", table_name=table)
    op.drop_column(table, "owner")
