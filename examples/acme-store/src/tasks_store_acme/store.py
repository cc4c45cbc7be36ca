"""``AcmeStore``: named in-process stores, so an application and its in-process workers
can share one store by name (``acme://<name>``). :class:`AcmeStore` lists its
capabilities and what opening a name again does.
"""

from __future__ import annotations

import re
import threading
from typing import Any
from urllib.parse import urlsplit

from tasks_core import InvalidInput, UnknownStore
from tasks_core.plugins import check_create
from tasks_store_memory import MemoryStore

__all__ = ["AcmeStore", "drop", "open_acme"]

OPTIONS = frozenset({"clock", "limits", "max_tasks", "max_active_tasks_per_scope", "namespace",
                     "create"})
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_stores: dict[tuple[str, str], AcmeStore] = {}
_lock = threading.Lock()


class AcmeStore(MemoryStore):
    """A ``MemoryStore`` with a name.

    Capability matrix (inherited from ``MemoryStore``, which does the work):

    =================  =====  ==============================================
    capability         value  why
    =================  =====  ==============================================
    durable            no     data lives as long as the process
    multi_process      no     one process only
    wakeups            yes    in-process wakeups
    cancel_wakeups     yes    in-process, as wakeups
    exclusive_queues   yes    checked under the store lock
    =================  =====  ==============================================

    URL format: ``acme://<name>`` (``acme://`` is the name ``default``). Opening the same name
    and ``namespace`` again in the process returns the same store; options (``clock``,
    ``max_tasks``…) apply only when a store is created. ``aclose()`` wakes waiting workers but
    keeps the data for the next opener; :func:`drop` forgets a store.
    """

    def __init__(self, name: str, **options: Any) -> None:
        """Create an empty store called ``name``; ``options`` as for ``MemoryStore``."""
        super().__init__(**options)
        self.name = name


def name_of(url: str) -> str:
    """The store name in an ``acme://<name>`` URL.

    Raises:
        InvalidInput: another scheme, or a name that is not 1-64 of ``[A-Za-z0-9_.-]``.
    """
    parts = urlsplit(url)
    name = parts.netloc or "default"
    if parts.scheme != "acme" or parts.path not in ("", "/") or not _NAME.fullmatch(name):
        raise InvalidInput("AcmeStore URLs look like 'acme://<name>' (letters, digits, _.-)")
    return name


async def open_acme(url: str, **options: Any) -> AcmeStore:
    """Open (creating on first use, unless ``create=False``) the store named by ``url``
    in ``namespace``.

    Raises:
        InvalidInput: a bad URL, an unknown option, or options for a store already open.
        UnknownStore: ``create=False`` and no store of that name and namespace exists.
    """
    name = name_of(url)
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise InvalidInput(f"Unknown AcmeStore option(s): {', '.join(unknown)}")
    namespace = options.pop("namespace", None)
    create = check_create(options.pop("create", True))
    key = (name, namespace or "")
    with _lock:
        store = _stores.get(key)
        if store is None and not create:
            raise UnknownStore(f"no store acme://{name} in namespace {namespace or '(default)'} "
                               "in this process (create=False never makes one)")
        if store is None:
            store = _stores[key] = AcmeStore(name, namespace=namespace, **options)
        elif options:
            raise InvalidInput(f"acme://{name} is open already; options apply only at creation")
    return store


async def drop(url: str, namespace: str | None = None) -> None:
    """Forget the store named by ``url`` in ``namespace`` (its data is gone)."""
    with _lock:
        store = _stores.pop((name_of(url), namespace or ""), None)
    if store is not None:
        await store.aclose()
