"""Alembic environment of tasks-store-sql: runs on the connection the store hands over.

Never run this through the ``alembic`` command line: use
:func:`tasks_store_sql.migrate` (or ``tasks migrate --store URL``), which takes the
namespace lock and passes ``connection`` and ``prefix`` in ``config.attributes``.
"""

from __future__ import annotations

from alembic import context

config = context.config
connection = config.attributes["connection"]
prefix: str = config.attributes["prefix"]

context.configure(
    connection=connection,
    version_table=f"{prefix}tasks_schema_version",
    tasks_prefix=prefix,
)
with context.begin_transaction():
    context.run_migrations()
