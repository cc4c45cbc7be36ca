"""The default store URL: the one place that decides it.

``TASKS_STORE`` (environment) wins. Otherwise the embedded default is a SQLite file,
``sqlite:///tasks.db``, as soon as a plugin serving ``sqlite`` is installed
(``pip install tasks-store-sql``); without one, ``memory://`` (volatile, this process only).
"""

from __future__ import annotations

import os

from tasks_core._registry import find_store
from tasks_core.errors import TasksError

__all__ = ["EMBEDDED_STORE_URL", "ENV_VAR", "FALLBACK_STORE_URL", "default_store_url"]

ENV_VAR = "TASKS_STORE"
EMBEDDED_STORE_URL = "sqlite:///tasks.db"
FALLBACK_STORE_URL = "memory://"


def default_store_url() -> tuple[str, str]:
    """The default store URL and why it was chosen (for a CLI to say so)."""
    configured = os.environ.get(ENV_VAR, "").strip()
    if configured:
        return configured, f"from ${ENV_VAR}"
    try:
        find_store(EMBEDDED_STORE_URL)
    except TasksError:
        return FALLBACK_STORE_URL, "no sqlite store plugin installed (pip install tasks-store-sql)"
    return EMBEDDED_STORE_URL, "the embedded default"
