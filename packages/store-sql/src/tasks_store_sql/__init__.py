"""tasks-store-sql: the SQL store of tasks (SQLite, PostgreSQL, MariaDB/MySQL).

``open_store("sqlite:///tasks.db")`` (or ``postgresql://…``, ``mysql://…``) opens an
:class:`SQLStore` — on PostgreSQL with asyncpg its subclass :class:`PostgresStore`, on a
SQLite file :class:`SQLiteStore`; see
:class:`SQLStore` for capabilities, URLs and options, and :func:`migrate` for schema
migrations.
"""

from __future__ import annotations

from tasks_store_sql.migrations_api import (
    SchemaMismatch,
    current_revision,
    head,
    migrate,
    revisions,
)
from tasks_store_sql.postgres import PostgresStore
from tasks_store_sql.sqlite import SQLiteStore
from tasks_store_sql.store import SQLStore

__all__ = [
    "PostgresStore",
    "SQLStore",
    "SQLiteStore",
    "SchemaMismatch",
    "current_revision",
    "head",
    "migrate",
    "revisions",
]
