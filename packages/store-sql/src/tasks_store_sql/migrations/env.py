"""Alembic environment of tasks-store-sql: runs on the connection the store hands over.

Never run this through the ``alembic`` command line: use
:func:`tasks_store_sql.migrate` (or ``tasks migrate --store URL``), which takes the
namespace lock and passes ``connection`` and ``prefix`` in ``config.attributes``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

config = context.config
connection = config.attributes["connection"]
prefix: str = config.attributes["prefix"]
version_table = f"{prefix}tasks_schema_version"

if connection.dialect.name in ("mysql", "mariadb"):
    # MySQL and MariaDB call every primary key PRIMARY and warn about the name Alembic
    # gives it: create Alembic's table first, with the same column and an unnamed key.
    sa.Table(
        version_table, sa.MetaData(), sa.Column("version_num", sa.String(32), primary_key=True)
    ).create(connection, checkfirst=True)

context.configure(
    connection=connection,
    version_table=version_table,
    tasks_prefix=prefix,
)
with context.begin_transaction():
    context.run_migrations()
