"""The ids the running code created inside an application's transaction that is still
open (a :class:`~contextvars.ContextVar`: each asyncio task keeps its own, and the tasks it
starts copy it).

Rule: a create of the store's own (no ``transaction=``) of such an id is refused at once
with ``Unavailable``. It would wait for the row (SQLite: the write lock) that transaction
holds, while the code that must end the transaction waits for the create — a hang, and
every create of the process queued behind it. Other code's create of the id waits for
the transaction's end, then joins or creates as usual.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core.errors import Unavailable

__all__ = ["refuse_open", "remember"]

_OPEN: ContextVar[tuple[tuple[str, weakref.ref[Any]], ...]] = ContextVar(
    "tasks_store_sql_open_creates", default=())


def remember(connection: AsyncConnection, ids: Iterable[str]) -> None:
    """Note ``ids``, just created inside the transaction of ``connection``."""
    transaction = connection.sync_connection and connection.sync_connection.get_transaction()
    if transaction is None:
        return
    held = weakref.ref(transaction)
    _OPEN.set((*((task_id, ref) for task_id, ref in _OPEN.get() if _open(ref)),
               *((task_id, held) for task_id in ids)))


def refuse_open(ids: Iterable[str]) -> None:
    """Refuse a create of the store's own of any of ``ids`` that this code created in a
    transaction still open (module docstring).

    Raises:
        Unavailable: naming the first such id.
    """
    noted = _OPEN.get()
    if not noted:
        return
    held = {task_id for task_id, ref in noted if _open(ref)}
    for task_id in ids:
        if task_id in held:
            raise Unavailable(
                f"task {task_id!r} is being created inside your transaction, which is still "
                "open: a submit outside it would wait for that transaction for ever — "
                "submit it with transaction= or after the commit")


def _open(ref: weakref.ref[Any]) -> bool:
    transaction = ref()
    return transaction is not None and bool(transaction.is_active)
