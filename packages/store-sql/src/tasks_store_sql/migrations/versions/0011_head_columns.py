"""The snapshot's head in columns: the keys a claim or a completion writes become columns
of ``tasks`` (those that were not columns already) and the ``snapshot`` text keeps the
rest (the body), which a claim or a completion never rewrites.

The upgrade takes each stored text apart (a text that is not a JSON object is left as it
is: unreadable before, unreadable after); the downgrade puts the head back at the front
of the text. Both in plain JSON, in batches (this file keeps no code of the store's).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from tasks_store_sql._types import Document, Ident, Instant
from tasks_store_sql.migrations import (
    batches,
    json_object,
    json_text,
    prefix,
    rewrite_snapshots,
    spelled_instant,
)

revision = "0011"
down_revision = "0010"

_ENDED, _RECOVERED, _HELD = 1, 2, 4
_HEAD = ("status", "revision", "progress", "result", "error", "cancel_reason", "retry_at",
         "deliveries", "input_requests", "claim", "lease_generation", "updated_at",
         "started_at", "finished_at", "expires_at")
"""The head's keys, in the order the snapshot model declares them."""
_NEW: list[tuple[str, sa.types.TypeEngine[Any]]] = [
    ("progress", Document()), ("result", Document()), ("error", Document()),
    ("cancel_reason", sa.String(32)), ("deliveries", sa.Integer()),
    ("input_requests", Document()), ("claim_worker", sa.String(256)),
    ("claim_until", Instant()), ("claim_flags", sa.SmallInteger()),
    ("lease_generation", sa.Integer()), ("started_at", Instant()), ("finished_at", Instant()),
]
_COUNTERS = ("deliveries", "lease_generation")


def _tasks() -> sa.TableClause:
    return sa.table(
        f"{prefix(op)}tasks", sa.column("id", Ident(1024)), sa.column("snapshot", Document()),
        sa.column("status", sa.String(16)), sa.column("revision", sa.Integer()),
        sa.column("retry_at", Instant()), sa.column("updated_at", Instant()),
        sa.column("expires_at", Instant()), sa.column("claim_generation", sa.Integer()),
        *(sa.column(name, type_) for name, type_ in _NEW),
    )


def _parsed(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _instant(text: Any) -> datetime | None:
    if text is None:
        return None
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).astimezone(UTC)


def _taken_apart(text: str) -> dict[str, Any] | None:
    """The new columns and the body of a stored text (``None``: not a JSON object)."""
    document = json_object(text)
    if document is None:
        return None
    claim = document.get("claim")
    if not isinstance(claim, dict):
        claim = None
    requests = document.get("input_requests")

    def text_of(key: str) -> str | None:
        value = document.get(key)
        return None if value is None else json_text(value)

    return {
        "b_progress": text_of("progress"), "b_result": text_of("result"),
        "b_error": text_of("error"), "b_cancel_reason": document.get("cancel_reason"),
        "b_deliveries": document.get("deliveries") or 0,
        "b_input_requests": json_text(requests) if requests else None,
        "b_claim_worker": None if claim is None else claim.get("worker_id"),
        "b_claim_until": None if claim is None else _instant(claim.get("expires_at")),
        "b_claim_flags": None if claim is None else (
            (_ENDED if claim.get("ended") else 0) | (_RECOVERED if claim.get("recovered") else 0)
            | (_HELD if claim.get("held") else 0)),
        "b_lease_generation": document.get("lease_generation") or 0,
        "b_started_at": _instant(document.get("started_at")),
        "b_finished_at": _instant(document.get("finished_at")),
        "b_snapshot": json_text({k: v for k, v in document.items() if k not in _HEAD}),
    }


def upgrade() -> None:
    """Add the columns (the counters ``NOT NULL DEFAULT 0``) and move each stored head
    into them."""
    table = f"{prefix(op)}tasks"
    for name, type_ in _NEW:
        counter = name in _COUNTERS
        op.add_column(table, sa.Column(name, type_, nullable=not counter,
                                       server_default="0" if counter else None))
    tasks = _tasks()
    write = sa.update(tasks).where(tasks.c.id == sa.bindparam("b_id")).values(
        snapshot=sa.bindparam("b_snapshot"),
        **{name: sa.bindparam(f"b_{name}") for name, _ in _NEW})
    for rows in batches(op, sa.select(tasks.c.id, tasks.c.snapshot)):
        moved = []
        for task_id, text in rows:
            values = _taken_apart(text)
            if values is not None:
                moved.append({"b_id": task_id, **values})
        if moved:
            op.get_bind().execute(write, moved)


def _with_head(values: Any, body: dict[str, Any]) -> dict[str, Any]:
    """The stored text's document at 0010: the head from the columns, then the body."""
    flags = values["claim_flags"] or 0
    claim = None if values["claim_worker"] is None else {
        "worker_id": values["claim_worker"], "generation": values["claim_generation"],
        "expires_at": spelled_instant(values["claim_until"]), "ended": bool(flags & _ENDED),
        "recovered": bool(flags & _RECOVERED), **({"held": True} if flags & _HELD else {}),
    }
    return {
        "status": values["status"], "revision": values["revision"],
        "progress": _parsed(values["progress"]), "result": _parsed(values["result"]),
        "error": _parsed(values["error"]), "cancel_reason": values["cancel_reason"],
        "retry_at": spelled_instant(values["retry_at"]), "deliveries": values["deliveries"],
        "input_requests": _parsed(values["input_requests"]) or {}, "claim": claim,
        "lease_generation": values["lease_generation"],
        "updated_at": spelled_instant(values["updated_at"]),
        "started_at": spelled_instant(values["started_at"]),
        "finished_at": spelled_instant(values["finished_at"]),
        "expires_at": spelled_instant(values["expires_at"]),
        **body,
    }


def downgrade() -> None:
    """Put each head back at the front of its text, then drop the columns."""
    tasks = _tasks()
    head = [tasks.c[name] for name in ("status", "revision", "retry_at", "updated_at",
                                       "expires_at", "claim_generation")]
    read = sa.select(tasks.c.id, tasks.c.snapshot, *head, *(tasks.c[n] for n, _ in _NEW))
    rewrite_snapshots(op, tasks, read, _with_head)
    table = f"{prefix(op)}tasks"
    for name, _ in reversed(_NEW):
        op.drop_column(table, name)
