"""The SQL store on a SQLite file: :class:`SQLiteStore` (see its module)."""

from __future__ import annotations

from tasks_store_sql.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
