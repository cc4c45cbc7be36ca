"""Column types that mean the same on every dialect (used by the schema and migrations).

- :class:`Ident`: ids and names compared byte for byte and ordered by code point, like
  Python's ``str`` (keyset pages must agree with the reference store): ``VARCHAR COLLATE
  "C"`` on PostgreSQL, ``VARBINARY`` on MariaDB/MySQL (whose text collations ignore case
  or trailing spaces), plain ``VARCHAR`` (BINARY collation) on SQLite.
- :class:`Instant`: an aware UTC instant, millisecond resolution: ``timestamptz`` on
  PostgreSQL, ``DATETIME(3)`` in UTC on MariaDB/MySQL, ISO text on SQLite (text that is no
  instant, a hand edit, is read back as it is: only its record decodes as corrupt).
- :class:`Document`: JSON text of any size (``LONGTEXT`` on MariaDB/MySQL).

Rule: these types are frozen — migrations import them, so changing one changes history.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = ["Document", "Ident", "Instant", "is_mysql"]


def is_mysql(dialect: Dialect) -> bool:
    """Whether ``dialect`` is MariaDB or MySQL."""
    return dialect.name in ("mysql", "mariadb")


class Ident(TypeDecorator[str]):
    """A case- and space-exact identifier ordered by code point (see the module docstring)."""

    impl = sa.String
    cache_ok = True

    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(sa.String(self.length, collation="C"))
        if is_mysql(dialect):
            return dialect.type_descriptor(mysql.VARBINARY(self.length))
        return dialect.type_descriptor(sa.String(self.length))

    def process_bind_param(self, value: str | None, dialect: Dialect) -> Any:
        if value is not None and is_mysql(dialect):
            return value.encode()
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value).decode()
        return value  # type: ignore[no-any-return]


class Instant(TypeDecorator[datetime]):
    """An aware UTC instant, millisecond resolution (see the module docstring)."""

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.TIMESTAMP(timezone=True, precision=3))
        if is_mysql(dialect):
            return dialect.type_descriptor(mysql.DATETIME(fsp=3))
        return dialect.type_descriptor(sa.DateTime())

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if dialect.name == "postgresql":
            return value
        return value.replace(tzinfo=None)

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        """On SQLite, :meth:`process_result_value` alone (the driver's own parse of the
        text would raise for the whole result)."""
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)
        return lambda value: self.process_result_value(value, dialect)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                return value  # type: ignore[no-any-return]  # (damage: module docstring)
        if not isinstance(value, datetime):
            raise TypeError("not an instant")
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Document(TypeDecorator[str]):
    """JSON text of any size."""

    impl = sa.Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if is_mysql(dialect):
            return dialect.type_descriptor(mysql.LONGTEXT())
        return dialect.type_descriptor(sa.Text())
