"""Schema migrations as plain functions (what ``tasks migrate --store URL`` calls)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from tasks_store_sql._migrate import SchemaMismatch, head, revisions
from tasks_store_sql.store import SQLStore

__all__ = ["SchemaMismatch", "current_revision", "head", "migrate", "revisions"]


async def migrate(
    url: str | None = None,
    *,
    engine: AsyncEngine | None = None,
    namespace: str | None = None,
    to: str = "head",
    **options: Any,
) -> str | None:
    """Move the schema of a namespace to revision ``to`` (up or down; ``"head"`` is the
    revision this code expects, ``"base"`` drops every table). Safe to run from several
    processes at once: a per-namespace lock serializes them.

    Args:
        url: the store URL (or give ``engine``).
        engine: an engine the application owns (not disposed of).
        namespace: the namespace (default: none).
        to: the target revision.
        **options: further ``SQLStore`` options (``busy_timeout``, ``engine_options``).

    Returns:
        The revision before (``None``: the namespace had no schema).

    Raises:
        InvalidInput: a bad URL, option or revision.
        SchemaMismatch: the namespace is at a revision this code does not know.
        StoreUnavailable: the database is unavailable.
    """
    store = SQLStore(url, engine=engine, namespace=namespace, schema="check", **options)
    try:
        return await store.migrate(to)
    finally:
        await store.aclose()


async def current_revision(
    url: str | None = None, *, engine: AsyncEngine | None = None, namespace: str | None = None
) -> str | None:
    """The schema revision of a namespace (``None``: no schema).

    Raises:
        StoreUnavailable: the database is unavailable.
    """
    store = SQLStore(url, engine=engine, namespace=namespace, schema="check")
    try:
        return await store.schema_revision()
    finally:
        await store.aclose()
