"""The body without the keys the row holds anyway (``id``, ``tenant``, ``owner``, ``queue``,
``run_id``, ``created_at``, ``run_at``): a read spells them from the columns, the body's
own keys last.

The upgrade takes each key out of a stored body when its column gives back the same value
(one that does not stays, and goes on winning); a text that is not a JSON object is left
as it is. The downgrade puts every key back from the columns, the body's keys winning.
Both in plain JSON, in batches (this file keeps no code of the store's).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from tasks_store_sql._types import Document, Ident, Instant
from tasks_store_sql.migrations import prefix, rewrite_snapshots, spelled_instant

revision = "0013"
down_revision = "0012"

_DEFAULT = "default"
"""The default tenant and queue (a body leaves a value at its default out)."""


def _tasks() -> sa.TableClause:
    return sa.table(
        f"{prefix(op)}tasks", sa.column("id", Ident(1024)), sa.column("snapshot", Document()),
        sa.column("tenant", Ident(256)), sa.column("owner", Ident(256)),
        sa.column("queue", Ident(256)), sa.column("run_id", sa.String(64)),
        sa.column("created_at", Instant()), sa.column("run_at", Instant()),
    )



def _instant(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def _owner(row: Any) -> dict[str, str] | None:
    if row["owner"] is None:
        return None
    tenant = {} if row["tenant"] == _DEFAULT else {"tenant": row["tenant"]}
    return {"user_id": row["owner"], **tenant}


def _same(row: Any) -> dict[str, Callable[[Any], bool]]:
    """For each key, whether a body's value of it is what the row's columns give back."""
    return {
        "id": lambda v: v == row["id"],
        "tenant": lambda v: v == row["tenant"],
        "owner": lambda v: (v is None if row["owner"] is None else isinstance(v, dict)
                            and v.get("user_id") == row["owner"]
                            and v.get("tenant", _DEFAULT) == row["tenant"]),
        "queue": lambda v: v == row["queue"],
        "run_id": lambda v: v == row["run_id"],
        "created_at": lambda v: row["created_at"] is not None and _instant(v) == row["created_at"],
        "run_at": lambda v: (v is None if row["run_at"] is None
                             else _instant(v) == row["run_at"]),
    }


def _rewrite(document_of: Callable[[Any, dict[str, Any]], dict[str, Any]]) -> None:
    tasks = _tasks()
    read = sa.select(tasks.c.id, tasks.c.snapshot, tasks.c.tenant, tasks.c.owner,
                     tasks.c.queue, tasks.c.run_id, tasks.c.created_at, tasks.c.run_at)
    rewrite_snapshots(op, tasks, read, document_of)


def _without_row_keys(row: Any, document: dict[str, Any]) -> dict[str, Any]:
    same = _same(row)
    return {key: value for key, value in document.items()
            if not (key in same and same[key](value))}


def _with_row_keys(row: Any, document: dict[str, Any]) -> dict[str, Any]:
    queue = {} if row["queue"] == _DEFAULT else {"queue": row["queue"]}
    run_at = {} if row["run_at"] is None else {"run_at": spelled_instant(row["run_at"])}
    return {"id": row["id"], "tenant": row["tenant"], "owner": _owner(row), **queue,
            "run_id": row["run_id"], "created_at": spelled_instant(row["created_at"]), **run_at,
            **document}


def upgrade() -> None:
    """Take the keys the columns give back out of every body."""
    _rewrite(_without_row_keys)


def downgrade() -> None:
    """Put the keys back into every body from the columns."""
    _rewrite(_with_row_keys)
