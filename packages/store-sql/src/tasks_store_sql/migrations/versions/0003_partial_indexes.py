"""Partial indexes on tasks: each index holds only the rows its queries look for; the
expiry index in reaping order, the retry index in a queue's retry order. MariaDB has no
partial indexes: there only those two change (:func:`upgrade` says which rows each holds).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tasks_store_sql.migrations import prefix

revision = "0003"
down_revision = "0002"


def _constant(value: str) -> sa.ColumnElement[str]:
    quoted = sa.literal(value, sa.String).compile(compile_kwargs={"literal_binds": True})
    return sa.literal_column(str(quoted), sa.String)


_INDEXES: list[tuple[str, list[str], sa.ColumnElement[bool] | None]] = [
    ("ix_tasks_claim", ["queue", "status", "created_at", "id"],
     sa.and_(sa.column("status") == _constant("pending"), sa.column("claim_expires_at").is_(None),
             sa.column("retry_at").is_(None))),
    ("ix_tasks_lease", ["queue", "claim_expires_at"], sa.column("claim_expires_at").is_not(None)),
    ("ix_tasks_retry", ["queue", "retry_at"], sa.column("retry_at").is_not(None)),
    ("ix_tasks_expires", ["expires_at", "id"], sa.column("expires_at").is_not(None)),
    ("ix_tasks_active", ["tenant", "status", "expires_at"],
     sa.column("status").in_([_constant("pending"), _constant("waiting_input")])),
]


_BEFORE = {"ix_tasks_expires": ["expires_at"], "ix_tasks_retry": ["status", "retry_at"]}
"""Columns of the indexes this revision re-keys, as revision 0001 made them."""


def _indexes() -> list[tuple[str, list[str], sa.ColumnElement[bool] | None]]:
    if op.get_bind().dialect.name in ("postgresql", "sqlite"):
        return list(_INDEXES)
    return [(name, columns, None) for name, columns, _ in _INDEXES
            if name in ("ix_tasks_expires", "ix_tasks_retry")]


def upgrade() -> None:
    """Rebuild each index over the rows it is for. The claim index holds pending tasks with
    no lease and no retry pending, the lease index live (or expired, unended) leases, the
    retry index tasks waiting for a retry, the expiry index tasks with an expiry, the active
    index tasks counted against ``max_active_tasks_per_scope``. An update that leaves a
    row's set inserts nothing into that index: a completion touches three of the table's
    seven indexes instead of all of them, the claim index no longer grows with finished
    tasks, and a claim no longer walks past running ones. The expiry index becomes
    ``(expires_at, id)``, the order the reaper reads expired tasks in, and the retry index
    ``(queue, retry_at)``, the order a claim reads due retries of a queue in."""
    p = prefix(op)
    for name, columns, where in _indexes():
        op.drop_index(f"{p}{name}", table_name=f"{p}tasks")
        op.create_index(f"{p}{name}", f"{p}tasks", columns,
                        postgresql_where=where, sqlite_where=where)


def downgrade() -> None:
    p = prefix(op)
    for name, columns, _ in _indexes():
        op.drop_index(f"{p}{name}", table_name=f"{p}tasks")
        op.create_index(f"{p}{name}", f"{p}tasks", _BEFORE.get(name, columns))
