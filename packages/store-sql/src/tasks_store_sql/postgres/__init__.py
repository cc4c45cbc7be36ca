"""The SQL store on PostgreSQL through asyncpg: :class:`PostgresStore` (a ``SQLStore``)
and the statements of its hot path, compiled once per namespace for asyncpg.

Modules: :mod:`.store` (the class), :mod:`._base` (statements, the lock and the write),
:mod:`._claims`, :mod:`._transitions`, :mod:`._creates` (the operations it overrides),
and the statements :mod:`._statements`, :mod:`._claim_sql`, :mod:`._complete_sql`,
:mod:`._create_sql`.
"""

from __future__ import annotations

from tasks_store_sql.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
