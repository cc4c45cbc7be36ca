"""``PostgresStore``: the SQL store on PostgreSQL through asyncpg — ``SQLStore`` with the
operations it runs on its own statements overridden (``SQLStore(url)`` gives it for a
PostgreSQL URL on asyncpg, and for an asyncpg engine).

What it keeps of ``SQLStore`` unchanged: reads, administration, limited queues, the
application's transaction for ``create``, migrations and the waits. Every decision is
still :mod:`tasks_core.rules` and :mod:`tasks_core.storekit`; the statements that decide
in SQL are held to them byte for byte by their tests.
"""

from __future__ import annotations

from tasks_store_sql.postgres._base import on_asyncpg
from tasks_store_sql.postgres._bulk import PostgresBulk

__all__ = ["PostgresStore"]


class PostgresStore(PostgresBulk, serves=on_asyncpg):
    """The SQL store on PostgreSQL with asyncpg (see ``SQLStore`` for URLs and options).

    Its hot path runs prebuilt statements on the driver's connection: ``claim_next`` in
    up to two tiers (:mod:`._claims`), ``claim``/``renew``/``report_progress``/
    ``release`` in one lock and one write, ``transition_many`` with the completions of
    claimed runs in one statement (:mod:`._transitions`), and creates of one event loop
    together in one statement (:mod:`._creates`), ``create_many`` in a few (:mod:`._bulk`).
    """
