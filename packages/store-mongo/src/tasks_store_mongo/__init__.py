"""tasks-store-mongo: the MongoDB store of tasks (``mongodb://``).

``MongoStore`` runs on PyMongo's ``AsyncMongoClient`` (the default) or on motor's
``AsyncIOMotorClient``, one implementation for both. See ``MongoStore`` for the
capability matrix, and ``docs/mongodb.md`` for the URL format, the document model and why
each operation is atomic.

The driver is imported on first use of ``MongoStore``, so loading the plugin to list the
installed stores stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tasks_store_mongo.store import MongoStore

__all__ = ["MongoStore"]


def __getattr__(name: str) -> Any:
    if name == "MongoStore":
        from tasks_store_mongo.store import MongoStore

        return MongoStore
    raise AttributeError(f"module 'tasks_store_mongo' has no attribute {name!r}")
