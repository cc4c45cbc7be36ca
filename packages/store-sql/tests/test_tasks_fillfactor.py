"""Migration 0014: on PostgreSQL the ``tasks`` table fills its pages to
``TASKS_FILLFACTOR`` percent at insert (room for the versions claims and completions
write); down it is PostgreSQL's default again, and up the setting is back. Other dialects
migrate through it unchanged.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from tasks_store_sql import SQLStore, migrate
from tasks_store_sql._schema import TASKS_FILLFACTOR

pytestmark = pytest.mark.anyio


async def _options(store: SQLStore) -> list[str] | None:
    """The storage options of the store's ``tasks`` table (PostgreSQL; else ``None``)."""
    if store.engine.dialect.name != "postgresql":
        return None
    async with store.engine.connect() as conn:
        found = await conn.execute(sa.select(sa.column("reloptions"))
                                   .select_from(sa.table("pg_class"))
                                   .where(sa.column("relname") == store.tables.tasks.name))
        return list(found.scalar_one() or [])


async def test_the_tasks_table_leaves_room_on_its_pages_on_postgresql(
    db_url: str, fresh_namespace: str
) -> None:
    await migrate(db_url, namespace=fresh_namespace)
    store = await SQLStore.open(db_url, namespace=fresh_namespace)
    try:
        postgres = store.engine.dialect.name == "postgresql"
        set_ = [f"fillfactor={TASKS_FILLFACTOR}"] if postgres else None
        assert await _options(store) == set_

        await migrate(db_url, namespace=fresh_namespace, to="0013")
        assert await _options(store) == ([] if postgres else None)

        await migrate(db_url, namespace=fresh_namespace)
        assert await _options(store) == set_
    finally:
        await store.aclose()
