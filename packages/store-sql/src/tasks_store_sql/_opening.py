"""What a SQL store's opening options ask before anything connects: the schema mode, and
``create=False`` (every store's option: create nothing), which runs no DDL and refuses a
SQLite file that does not exist — connecting would make it."""

from __future__ import annotations

import os
from typing import Literal

from tasks_core.errors import InvalidInput, UnknownStore

from tasks_store_sql._url import Target

__all__ = ["SchemaMode", "check_file_exists", "schema_mode"]

SchemaMode = Literal["create", "upgrade", "check"]


def schema_mode(schema: SchemaMode | None, create: bool) -> SchemaMode:
    """The schema mode: ``schema`` as given, else ``"create"`` (``"check"`` with
    ``create=False``, which runs no DDL).

    Raises:
        InvalidInput: an unknown mode, or one that would run DDL with ``create=False``.
    """
    if schema is None:
        return "create" if create else "check"
    if schema not in ("create", "upgrade", "check"):
        raise InvalidInput("schema must be 'create', 'upgrade' or 'check'")
    if not create and schema != "check":
        raise InvalidInput(f"create=False never creates or migrates a schema; schema={schema!r} "
                           "would: leave schema out (or 'check')")
    return schema


def check_file_exists(target: Target) -> None:
    """With ``create=False``, a SQLite file must exist (connecting would create it).

    Raises:
        UnknownStore: naming the file.
    """
    path = target.sqlite_path
    if path is not None and not os.path.exists(path):
        raise UnknownStore(f"no SQLite store at {path}: the file does not exist "
                           "(create=False never creates one)")
