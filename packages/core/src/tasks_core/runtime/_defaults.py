"""The default store URL: the one place that decides it.

``TASKS_STORE`` (environment) wins; set but blank (an unset shell variable in
``TASKS_STORE="$URL"``) it is refused, never read as "the default store here". Otherwise
the embedded default is a SQLite file, ``sqlite:///tasks.db``, as soon as a plugin
serving ``sqlite`` is installed (the ``tasks-store-sql`` distribution); else ``memory://``
(volatile, this process only), which needs ``tasks-store-memory``. tasks-core depends on
neither: with both missing there is no default store, and
:func:`require_default_store_url` says what to install.
"""

from __future__ import annotations

import os

from tasks_core._registry import find_store
from tasks_core.errors import InvalidInput, TasksError, UnknownStore

__all__ = [
    "EMBEDDED_STORE_URL",
    "ENV_VAR",
    "FALLBACK_STORE_URL",
    "NO_DEFAULT_STORE",
    "default_store",
    "default_store_url",
    "installed",
    "require_default_store_url",
]

ENV_VAR = "TASKS_STORE"
EMBEDDED_STORE_URL = "sqlite:///tasks.db"
FALLBACK_STORE_URL = "memory://"
NO_DEFAULT_STORE = (
    f"No default store: neither tasks-store-sql (for {EMBEDDED_STORE_URL}) nor "
    f"tasks-store-memory (for {FALLBACK_STORE_URL}) is installed. Install one (from a clone "
    "of the repository: pip install ./packages/store-sql), or name an installed store "
    f"with --store URL or ${ENV_VAR}."
)


def installed(url: str) -> bool:
    """Whether a store plugin serves ``url``."""
    try:
        find_store(url)
    except TasksError:
        return False
    return True


def default_store_url() -> tuple[str, str]:
    """The default store URL and why it was chosen (for a CLI to say so).

    With no store plugin for either default it still answers ``memory://`` (with a reason
    saying that nothing serves it), so that ``tasks backends`` can show the situation;
    code about to open the default calls :func:`require_default_store_url` instead.

    Raises:
        InvalidInput: ``$TASKS_STORE`` is set but blank.
    """
    url, why, _ = default_store()
    return url, why


def default_store() -> tuple[str, str, bool]:
    """``(url, why, servable)``: ``servable`` is false only when nothing was configured and
    neither default's plugin is installed.

    Raises:
        InvalidInput: ``$TASKS_STORE`` is set but blank.
    """
    configured = os.environ.get(ENV_VAR)
    if configured is not None:
        if not configured.strip():
            raise InvalidInput(f"${ENV_VAR} is set but blank: set it to a store URL (e.g. "
                               f"{EMBEDDED_STORE_URL}), or unset it for the default store")
        return configured.strip(), f"from ${ENV_VAR}", True
    if installed(EMBEDDED_STORE_URL):
        return EMBEDDED_STORE_URL, "the embedded default", True
    if installed(FALLBACK_STORE_URL):
        return (FALLBACK_STORE_URL,
                "tasks-store-sql is not installed; volatile, this process only", True)
    return FALLBACK_STORE_URL, "neither tasks-store-sql nor tasks-store-memory is installed", False


def require_default_store_url() -> str:
    """The default store URL, when something can serve it.

    Raises:
        InvalidInput: ``$TASKS_STORE`` is set but blank.
        UnknownStore: ``$TASKS_STORE`` is unset and neither ``tasks-store-sql`` nor
            ``tasks-store-memory`` is installed (the message says what to install).
    """
    url, _, servable = default_store()
    if not servable:
        raise UnknownStore(NO_DEFAULT_STORE)
    return url
