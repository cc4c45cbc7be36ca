"""tasks-store-sql: the SQL store of tasks (SQLite, PostgreSQL, MariaDB/MySQL).

Not implemented yet. This distribution declares no ``tasks`` entry point, so
``tasks_core.open_store("sqlite:///tasks.db")`` raises ``UnknownStore`` until it does.
"""

from __future__ import annotations

__all__: list[str] = []
