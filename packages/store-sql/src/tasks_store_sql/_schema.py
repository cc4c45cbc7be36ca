"""The tables of one namespace, as SQLAlchemy Core objects (the shape migrations build).

Rules: every name carries the namespace prefix (``""`` by default, ``"<namespace>_"``
otherwise), indexes included, since PostgreSQL index names are per schema. A namespace
is 1–30 of ``a-z0-9_`` and never ``sqlite…`` on any dialect. Our own constants in
statements are inline literals (:func:`inline`), so planners match the partial indexes;
user data is always bound. The tables: :class:`Tables`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from tasks_core.models import TaskStatus

from tasks_store_sql._types import Document, Ident, Instant

__all__ = [
    "COUNTER",
    "ID_BYTES",
    "MISSING_COUNTER",
    "NAME_BYTES",
    "SCOPE_PREFIX",
    "TASKS_FILLFACTOR",
    "UNCOUNTED",
    "Tables",
    "active",
    "check_namespace",
    "head_columns",
    "inline",
    "listed",
    "pending",
    "prefix_of",
    "task_indexes",
    "unclaimed",
    "waiting",
]

ID_BYTES = 1024
NAME_BYTES = 256
EVENT_ID_BYTES = 256
TOKEN_CHARS = 256
TASKS_FILLFACTOR = 50
"""PostgreSQL: how full an insert leaves a page of ``tasks`` (percent, migration 0014):
the rest is room for the versions its rows' claims and completions write, pruned there."""
COUNTER = "task_count"
"""The creators' row: its ``value`` is the number of stored tasks, or :data:`UNCOUNTED`.
Named ``tasks`` before migration 0005 and ``creators`` before 0015; each rename stops the
creates of code that keeps the count another way (see those migrations)."""
UNCOUNTED = -1
"""The creators' row's value while nothing is counted: no store with a capacity limit
has created a task since migration 0015 made the namespace so. Creates of a store
without limits then count nothing, write no bound and — on PostgreSQL's one-statement
create — take no lock; the first create of a store with a limit counts the stored tasks
and keeps the count from then on (``_base.SQLBase._counted_total``)."""
MISSING_COUNTER = "The creators' lock row is missing: the schema is damaged or migrated away"
"""The refusal (``StoreError``) of a create that finds no creators' row."""
SCOPE_PREFIX = "scope:"
"""The lock rows of tenants' bounds (:mod:`tasks_store_sql._scopes`) begin with this."""

_NAMESPACE = re.compile(r"[a-z][a-z0-9_]{0,29}")


def check_namespace(namespace: str | None) -> str | None:
    """Validate a namespace: 1–30 of ``a-z0-9_``, starting with a letter, and not ``sqlite``
    or ``sqlite_…`` (SQLite reserves table names that begin with ``sqlite_``; refused on
    every dialect, so that a namespace means the same everywhere).

    Raises:
        ValueError: anything else (it becomes part of table names).
    """
    if namespace is None:
        return None
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise ValueError(
            "namespace must be 1-30 characters of a-z, 0-9 and _, starting with a letter"
        )
    if f"{namespace}_".startswith("sqlite_"):
        raise ValueError("namespace must not be 'sqlite' nor begin with 'sqlite_' (SQLite "
                         "reserves the table names it would give)")
    return namespace


@functools.cache
def inline(value: str) -> sa.ColumnElement[str]:
    """One of our own constants (a status name) written into the statement as a quoted
    literal instead of a bound parameter: a planner matches a partial index only against
    constants it can see (PostgreSQL's generic plans, SQLite when it prepares). Never for
    user data (made once per constant: statements share it)."""
    quoted = sa.literal(value, sa.String).compile(compile_kwargs={"literal_binds": True})
    return sa.literal_column(str(quoted), sa.String)


def pending(status: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """``status`` is the stored ``pending`` (claimable, or running under a lease)."""
    return status == inline(TaskStatus.PENDING.value)


def unclaimed(c: sa.ColumnCollection[str, sa.ColumnClause[Any]]) -> sa.ColumnElement[bool]:
    """A pending task with no lease (fresh, a retry, a delayed task): the rows of the claim
    index, claimable once their ``available_at`` has come (unless expired)."""
    return sa.and_(pending(c.status), c.claim_expires_at.is_(None))


def waiting(c: sa.ColumnCollection[str, sa.ColumnClause[Any]]) -> sa.ColumnElement[bool]:
    """An unleased pending task that may wait for its ``available_at``: a retry pending or
    a delayed task (a task without either is available from its creation on) — the rows
    of the waiting index, which serves ``next_available``."""
    return sa.and_(unclaimed(c), sa.or_(c.retry_at.is_not(None), c.run_at.is_not(None)))


def active(status: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """``status`` counts against ``max_active_tasks_per_scope`` (pending or waiting)."""
    return status.in_([inline(TaskStatus.PENDING.value),
                       inline(TaskStatus.WAITING_INPUT.value)])


LISTED = (TaskStatus.WAITING_INPUT, TaskStatus.FAILED, TaskStatus.CANCELLED)
"""The stored statuses the status index holds, in id order: every one but ``pending``
(the claim and lease indexes serve its listings, and a backlog is dense in id order) and
``completed`` (most finished tasks: dense in id order, and kept out of the index so a
finished task costs no entry in it)."""


def listed(status: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """``status`` is one of :data:`LISTED`: the predicate of the status index, which a
    listing of those statuses states as written (SQLite matches terms, not implications)."""
    return status.in_([inline(s.value) for s in LISTED])


def task_indexes(
    c: sa.ColumnCollection[str, sa.ColumnClause[Any]],
) -> list[tuple[str, list[sa.ColumnClause[Any]], sa.ColumnElement[bool]]]:
    """The partial indexes of ``tasks`` (name without prefix, columns, predicate), each
    holding only the rows its queries look for, so an update that leaves a row's set
    inserts nothing into it (a completion touches few of the table's indexes, not all of
    them) and a claim reads unclaimed rows only (:mod:`tasks_store_sql._candidates`).
    PostgreSQL and SQLite use the predicates; MariaDB has no partial indexes and indexes
    every row. The queries state the same predicates with constants (:func:`inline`).
    The claim index is in claim order, ``(neg_priority, available_at, id)`` within a
    queue, every key ascending (``neg_priority`` is minus the priority: no descending key,
    which MariaDB before 10.8 ignores): fresh tasks, due retries and due delayed tasks of
    one priority in one range ``available_at <= now``. The waiting index, ``(queue,
    available_at)`` over retries and delayed tasks only, serves ``next_available`` (the
    first past ``now`` whatever the priority, which the claim index holds in one range
    per priority). The status index, ``(status, id)`` over :data:`LISTED`, serves listings
    of those statuses in id order; the owner index, ``(tenant, owner, id)`` over owned
    tasks, a listing by principal of the tasks it owns in id order."""
    return [
        ("ix_tasks_claim", [c.queue, c.status, c.neg_priority, c.available_at, c.id],
         unclaimed(c)),
        ("ix_tasks_waiting", [c.queue, c.available_at], waiting(c)),
        ("ix_tasks_lease", [c.queue, c.claim_expires_at], c.claim_expires_at.is_not(None)),
        ("ix_tasks_expires", [c.expires_at, c.id], c.expires_at.is_not(None)),
        ("ix_tasks_active", [c.tenant, c.status, c.expires_at], active(c.status)),
        ("ix_tasks_status", [c.status, c.id], listed(c.status)),
        ("ix_tasks_owner", [c.tenant, c.owner, c.id], c.owner.is_not(None)),
    ]


def head_columns() -> list[sa.Column[Any]]:
    """The columns of the snapshot's head that ``tasks`` had no column for before
    migration 0011 (``_stored.HEAD_KEYS``; status, revision, ``retry_at``, ``updated_at``,
    ``expires_at`` and the claim's generation were columns already): JSON text of the
    progress, result, error and input requests; the cancel reason; the counters; the
    claim's worker, end and flags (``_stored.claim_flags``); the run's instants."""
    return [
        sa.Column("progress", Document(), nullable=True),
        sa.Column("result", Document(), nullable=True),
        sa.Column("error", Document(), nullable=True),
        sa.Column("cancel_reason", sa.String(32), nullable=True),
        sa.Column("deliveries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("input_requests", Document(), nullable=True),
        sa.Column("claim_worker", sa.String(TOKEN_CHARS), nullable=True),
        sa.Column("claim_until", Instant(), nullable=True),
        sa.Column("claim_flags", sa.SmallInteger, nullable=True),
        sa.Column("lease_generation", sa.Integer, nullable=False, server_default="0"),
        sa.Column("started_at", Instant(), nullable=True),
        sa.Column("finished_at", Instant(), nullable=True),
    ]


def prefix_of(namespace: str | None) -> str:
    """The table-name prefix of ``namespace``."""
    return f"{namespace}_" if namespace else ""


@dataclass(frozen=True)
class Tables:
    """The tables of one namespace.

    ``tasks``: one row per task — the snapshot's head as columns and the rest of it as
    JSON text (``snapshot``, the body: :mod:`tasks_store_sql._stored`) beside the
    columns queries filter on. ``claim_token`` lives only here, never in the JSON;
    ``claim_expires_at`` is the expiry of a lease that has not ended (``NULL``
    otherwise); ``available_at`` is ``rules.available_at`` of the snapshot, the claim
    order (``run_at`` beside it, for statements that clear ``retry_at`` in SQL), after
    ``neg_priority``, minus the task's priority (ascending in claim order);
    ``row_version`` grows on every write (claims and progress included), ``revision``
    only with applied events; ``final_event``, on a completed task, the id of the event
    that completed it, whose record the row stands for (``_codec.final_record``: the
    commonest record costs no row of its own). ``task_events``: the other applied
    events of the current run, keyed ``(task_id, event_id)`` (the replay check), unique
    ``(task_id, revision)``. ``owner``: the user id of the task's owner (its tenant is the
    task's); ``task_members``: the watchers of each task — a listing by principal reads the
    owner index and the members, both in task id order. ``ix_tasks_counts`` (``tenant,
    queue, status``, every row) serves ``counts``: an index-only scan, whose repeated keys
    PostgreSQL stores once per run of equal keys (B-tree deduplication). ``task_locks``:
    lock rows — ``task_count`` (the creators' row: its ``value`` counts stored tasks
    while a limit needs it, and creates then hold it: :mod:`._counting`),
    ``queue:<name>`` (one per limited queue, which serializes its claimers; its ``value``
    is the longest rate window in milliseconds any claimer asked for:
    :mod:`._queue_limits`) and
    ``scope:<tenant>`` (a bound on the tenant's active tasks: :mod:`._scopes`).
    ``queue_claims``: the claim instants of rate-limited queues, kept for that longest
    window. ``tasks_schema_version``: Alembic's version table.
    """

    prefix: str
    metadata: sa.MetaData
    tasks: sa.Table
    events: sa.Table
    members: sa.Table
    locks: sa.Table
    claims: sa.Table

    @property
    def version_table(self) -> str:
        """The name of Alembic's version table."""
        return f"{self.prefix}tasks_schema_version"

    @property
    def migrating_table(self) -> str:
        """The name of the table a MariaDB/MySQL migration holds while it runs
        (``_migrate``)."""
        return f"{self.prefix}tasks_schema_migrating"

    @property
    def names(self) -> list[str]:
        """Every table name of the namespace, version table included (drop order)."""
        return [
            self.events.name,
            self.members.name,
            self.locks.name,
            self.claims.name,
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
            sa.Column("run_at", Instant(), nullable=True),
            sa.Column("available_at", Instant(), nullable=False),
            sa.Column("neg_priority", sa.SmallInteger, nullable=False, server_default="0"),
            sa.Column("updated_at", Instant(), nullable=False),
            sa.Column("expires_at", Instant(), nullable=True),
            sa.Column("snapshot", Document(), nullable=False),
            sa.Column("max_deliveries", sa.Integer, nullable=True),
            sa.Column("final_event", Ident(EVENT_ID_BYTES), nullable=True),
            *head_columns(),
            sa.Column("owner", Ident(NAME_BYTES), nullable=True),
            sa.Index(f"{p}ix_tasks_tenant", "tenant", "id"),
            sa.Index(f"{p}ix_tasks_counts", "tenant", "queue", "status"),
            mysql_charset="utf8mb4",
            mysql_engine="InnoDB",
            postgresql_with={"fillfactor": TASKS_FILLFACTOR},
        )
        for name, columns, where in task_indexes(tasks.c):
            sa.Index(f"{p}{name}", *columns, postgresql_where=where, sqlite_where=where)
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
        claims = sa.Table(
            f"{p}queue_claims",
            md,
            sa.Column("queue", Ident(NAME_BYTES), nullable=False),
            sa.Column("claimed_at", Instant(), nullable=False),
            sa.Index(f"{p}ix_queue_claims", "queue", "claimed_at"),
            mysql_charset="utf8mb4",
            mysql_engine="InnoDB",
        )
        return cls(prefix, md, tasks, events, members, locks, claims)
