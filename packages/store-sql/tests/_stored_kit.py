"""Helpers of the tests that read a task's row behind the store: what it stores, the
snapshot that decodes to, what the codec would store."""

from __future__ import annotations

import sqlalchemy as sa
from tasks_core import Snapshot
from tasks_store_sql import SQLStore, _codec
from tasks_store_sql._stored import Stored, stored_columns


async def stored_row(store: SQLStore, task_id: str) -> Stored:
    """What the row of ``task_id`` stores (the body and the head's columns)."""
    t = store.tables.tasks
    async with store._db.engine.connect() as conn:
        row = (await conn.execute(sa.select(*stored_columns(t)).where(t.c.id == task_id))).one()
    return Stored(*row)


async def stored_snapshot(store: SQLStore, task_id: str) -> Snapshot:
    """The stored snapshot as ``rules`` sees it (decoded from the row, not presented)."""
    return _codec.decode_snapshot(task_id, await stored_row(store, task_id))


def stored_as_projected(snapshot: Snapshot) -> Stored:
    """What a row holding ``snapshot`` stores, as ``_codec.projection`` writes it."""
    return _codec.stored_of(_codec.projection(snapshot, None))
