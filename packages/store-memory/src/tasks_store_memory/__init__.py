"""tasks-store-memory: ``MemoryStore``, the volatile reference store (``memory://``)."""

from __future__ import annotations

from tasks_store_memory.store import MemoryStore

__all__ = ["MemoryStore"]
