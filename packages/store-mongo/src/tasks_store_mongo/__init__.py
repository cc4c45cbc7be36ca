"""tasks-store-mongo: the MongoDB store of tasks.

Not implemented yet. This distribution declares no ``tasks`` entry point, so
``tasks_core.open_store("mongodb://localhost")`` raises ``UnknownStore`` until it does.
"""

from __future__ import annotations

__all__: list[str] = []
