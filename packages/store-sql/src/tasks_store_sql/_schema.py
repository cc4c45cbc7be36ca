"""The tables of one namespace, as SQLAlchemy Core objects (the shape migrations build).

Every name carries the namespace prefix (``""`` by default, ``"<namespace>_"`` otherwise),
indexes included, since PostgreSQL index names are per schema.

``tasks``
    One row per task: the JSON snapshot (``snapshot``) beside projection columns for every
    query. ``claim_token`` lives only here, never in the JSON; ``claim_expires_at`` is the
    expiry of a lease that has not ended (``NULL`` otherwise). ``row_version`` grows on
    every write (claims and progress included); ``revision`` only with applied events.
``task_events``
    The applied events of the current run, keyed ``(task_id, event_id)`` (the replay
    check), unique ``(task_id, revision)``.
``task_members``
    Owner and watchers of each task, so listings by principal are a join.
``task_locks``
    Lock rows: ``tasks`` (serializes creators; its ``value`` counts stored tasks) and
    ``queue:<name>`` (one per exclusive queue).
``tasks_schema_version``
    Alembic's version table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlalchemy as sa

from tasks_store_sql._types import Document, Ident, Instant

__all__ = [
    "COUNTER",
    "ID_BYTES",
    "NAME_BYTES",
    "Tables",
    "check_namespace",
    "prefix_of",
]

ID_BYTES = 1024
NAME_BYTES = 256
EVENT_ID_BYTES = 256
TOKEN_CHARS = 256
COUNTER = "tasks"
"""The lock row creators hold; its ``value`` is the number of stored tasks."""

_NAMESPACE = re.compile(r"[a-z][a-z0-9_]{0,29}")


def check_namespace(namespace: str | None) -> str | None:
    """Validate a namespace: 1–30 of ``a-z0-9_``, starting with a letter.

    Raises:
        ValueError: anything else (it becomes part of table names).
    """
    if namespace is None:
        return None
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise ValueError(
            "namespace must be 1-30 characters of a-z, 0-9 and _, starting with a letter"
        )
    return namespace


def prefix_of(namespace: str | None) -> str:
    """The table-name prefix of ``namespace``."""
    return f"{namespace}_" if namespace else ""


@dataclass(frozen=True)
class Tables:
    """The tables of one namespace."""

    prefix: str
    metadata: sa.MetaData
    tasks: sa.Table
    events: sa.Table
    members: sa.Table
    locks: sa.Table

    @property
    def version_table(self) -> str:
        """The name of Alembic's version table."""
        return f"{self.prefix}tasks_schema_version"

    @property
    def names(self) -> list[str]:
        """Every table name of the namespace, version table included (drop order)."""
        return [
            self.events.name,
            self.members.name,
            self.locks.name,
            self.tasks.name,
            self.version_table,
        ]

    @classmethod
    def build(cls, prefix: str) -> Tables:
        """The tables named with ``prefix``."""
        md = sa.MetaData()
        p = prefix
        tasks = sa.Table(
            f"{p}tasks",
            md,
            sa.Column("id", Ident(ID_BYTES), primary_key=True),
            sa.Column("tenant", Ident(NAME_BYTES), nullable=False),
            sa.Column("queue", Ident(NAME_BYTES), nullable=False),
            sa.Column("status", sa.String(16), nullable=False),
            sa.Column("revision", sa.Integer, nullable=False),
            sa.Column("row_version", sa.Integer, nullable=False),
            sa.Column("run_id", sa.String(64), nullable=False),
            sa.Column("claim_token", sa.String(TOKEN_CHARS), nullable=True),
            sa.Column("claim_generation", sa.Integer, nullable=True),
            sa.Column("claim_expires_at", Instant(), nullable=True),
            sa.Column("retry_at", Instant(), nullable=True),
            sa.Column("created_at", Instant(), nullable=False),
            sa.Column("updated_at", Instant(), nullable=False),
            sa.Column("expires_at", Instant(), nullable=True),
            sa.Column("snapshot", Document(), nullable=False),
            sa.Index(f"{p}ix_tasks_claim", "queue", "status", "created_at", "id"),
            sa.Index(f"{p}ix_tasks_lease", "queue", "claim_expires_at"),
            sa.Index(f"{p}ix_tasks_retry", "status", "retry_at"),
            sa.Index(f"{p}ix_tasks_expires", "expires_at"),
            sa.Index(f"{p}ix_tasks_tenant", "tenant", "id"),
            sa.Index(f"{p}ix_tasks_active", "tenant", "status", "expires_at"),
            mysql_charset="utf8mb4",
            mysql_engine="InnoDB",
        )
        events = sa.Table(
            f"{p}task_events",
            md,
            sa.Column("task_id", Ident(ID_BYTES), primary_key=True),
            sa.Column("event_id", Ident(EVENT_ID_BYTES), primary_key=True),
            sa.Column("revision", sa.Integer, nullable=False),
            sa.Column("kind", sa.String(32), nullable=False),
            sa.Column("committed_at", Instant(), nullable=False),
            sa.Column("record", Document(), nullable=False),
            sa.UniqueConstraint("task_id", "revision", name=f"{p}uq_task_events_revision"),
            mysql_charset="utf8mb4",
            mysql_engine="InnoDB",
        )
        members = sa.Table(
            f"{p}task_members",
            md,
            sa.Column("tenant", Ident(NAME_BYTES), primary_key=True),
            sa.Column("user_id", Ident(NAME_BYTES), primary_key=True),
            sa.Column("task_id", Ident(ID_BYTES), primary_key=True),
            sa.Column("role", sa.String(8), nullable=False),
            sa.Index(f"{p}ix_task_members_task", "task_id"),
            mysql_charset="utf8mb4",
            mysql_engine="InnoDB",
        )
        locks = sa.Table(
            f"{p}task_locks",
            md,
            sa.Column("name", Ident(NAME_BYTES + 16), primary_key=True),
            sa.Column("value", sa.BigInteger, nullable=False),
            mysql_charset="utf8mb4",
            mysql_engine="InnoDB",
        )
        return cls(prefix, md, tasks, events, members, locks)
