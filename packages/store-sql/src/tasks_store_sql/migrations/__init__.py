"""Alembic migrations of the SQL store, shipped inside the package.

Each revision reads the namespace's table prefix with :func:`prefix` and builds every name
from it. Revisions are frozen history: a schema change is a new revision, and
``tests/test_migrations.py`` proves that the chain builds exactly ``_schema.Tables``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["prefix"]


def prefix(op: Any) -> str:
    """The table prefix of the namespace being migrated (``alembic.op`` in a revision)."""
    value = op.get_context().opts["tasks_prefix"]
    if not isinstance(value, str):
        raise TypeError("tasks_prefix must be a string")
    return value
