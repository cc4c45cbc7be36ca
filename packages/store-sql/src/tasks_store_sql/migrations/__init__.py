"""Alembic migrations of the SQL store, shipped inside the package.

Each revision reads the namespace's table prefix with :func:`prefix` and builds every name
from it; one that rewrites rows reads them with :func:`batches` (a stored text at a time:
:func:`rewrite_snapshots`, :func:`json_object`) and writes stored JSON with :func:`json_text`
and :func:`spelled_instant`. Revisions are frozen
history: a schema change is a new revision, and ``tests/test_migrations.py`` proves that
the chain builds exactly ``_schema.Tables``. These helpers are part of that history: one a
released revision calls never changes what it does (a new need is a new helper).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

__all__ = ["batches", "json_object", "json_text", "prefix", "rewrite_snapshots",
           "spelled_instant"]


def prefix(op: Any) -> str:
    """The table prefix of the namespace being migrated (``alembic.op`` in a revision)."""
    value = op.get_context().opts["tasks_prefix"]
    if not isinstance(value, str):
        raise TypeError("tasks_prefix must be a string")
    return value


def batches(op: Any, statement: Any, size: int = 1000) -> Iterator[Sequence[Any]]:
    """The rows of the select ``statement`` in batches of ``size``, in the order of its
    first column (unique: a task id), each read when the one before was handled — a
    revision that rewrites rows never holds a whole table in memory."""
    key = statement.selected_columns[0]
    after = ""
    while True:
        rows = op.get_bind().execute(statement.where(key > after).order_by(key)
                                     .limit(size)).all()
        if not rows:
            return
        yield rows
        after = rows[-1][0]


def json_text(value: Any) -> str:
    """Compact JSON text, ASCII-escaped, as the store writes it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def spelled_instant(value: datetime | None) -> str | None:
    """An instant as a snapshot's JSON spells it (without the fraction on a whole
    second)."""
    if value is None:
        return None
    value = value.astimezone(UTC)
    fraction = f".{value.microsecond:06d}" if value.microsecond else ""
    return value.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"


def json_object(text: Any) -> dict[str, Any] | None:
    """The JSON object a stored text holds (``None``: not JSON, or not an object)."""
    try:
        document = json.loads(text)
    except (ValueError, TypeError):
        return None
    return document if isinstance(document, dict) else None


def rewrite_snapshots(
    op: Any, tasks: Any, read: Any,
    document_of: Callable[[Any, dict[str, Any]], dict[str, Any]],
) -> None:
    """Each ``snapshot`` of the rows ``read`` selects (the task id first) that holds a JSON
    object, written back as :func:`json_text` of ``document_of(row mapping, object)``; a
    text that holds none stays as it is."""
    write = sa.update(tasks).where(tasks.c.id == sa.bindparam("b_id")).values(
        snapshot=sa.bindparam("b_snapshot"))
    for rows in batches(op, read):
        texts = []
        for row in rows:
            values = row._mapping
            document = json_object(values["snapshot"])
            if document is not None:
                texts.append({"b_id": values["id"],
                              "b_snapshot": json_text(document_of(values, document))})
        if texts:
            op.get_bind().execute(write, texts)
