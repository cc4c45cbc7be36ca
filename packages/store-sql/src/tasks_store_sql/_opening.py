"""What a SQL store's opening options ask before anything connects: the schema mode, and
``create=False`` (every store's option: create nothing), which runs no DDL whatever
``schema`` says and refuses a SQLite file that does not exist — connecting would make it."""

from __future__ import annotations

import os
from typing import Literal

from tasks_core.errors import InvalidInput, UnknownStore

from tasks_store_sql._url import Target

__all__ = ["SchemaMode", "check_file_exists", "schema_mode"]

SchemaMode = Literal["create", "upgrade", "check"]


def schema_mode(schema: SchemaMode, create: bool) -> SchemaMode:
    """The schema mode: ``schema``, or ``"check"`` (no DDL) with ``create=False`` — what
    ``schema`` allows, ``create=False`` forbids.

    Raises:
        InvalidInput: an unknown mode.
    """
    if schema not in ("create", "upgrade", "check"):
        raise InvalidInput("schema must be 'create', 'upgrade' or 'check'")
    return schema if create else "check"


def check_file_exists(target: Target) -> None:
    """With ``create=False``, a SQLite file must exist (connecting would create it).

    Raises:
        UnknownStore: naming the file.
    """
    path = target.sqlite_path
    if path is not None and not os.path.exists(path):
        raise UnknownStore(f"no SQLite store at {path}: the file does not exist "
                           "(create=False never creates one)")
