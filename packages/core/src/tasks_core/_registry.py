"""The one module that calls ``pm.hook``: finding and opening store plugins.

Only the plugin whose entry-point name matches the requested scheme or name is imported;
``open_store`` imports it in a thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Generator
from importlib.metadata import EntryPoint, entry_points
from types import TracebackType
from typing import Any

import pluggy

from tasks_core.errors import PluginConflict, UnknownStore
from tasks_core.plugins import PROJECT, StoreSpec, _Hooks, install_hint
from tasks_core.store import TaskStore

__all__ = ["available_stores", "find_store", "open_store", "scheme_of"]

# Where the first-party schemes live, for the install hint when nothing serves them.
KNOWN_DISTRIBUTIONS = {
    "memory": "tasks-store-memory",
    "sql": "tasks-store-sql",
    "sqlite": "tasks-store-sql",
    "postgresql": "tasks-store-sql",
    "postgres": "tasks-store-sql",
    "mysql": "tasks-store-sql",
    "mariadb": "tasks-store-sql",
    "mongo": "tasks-store-mongo",
    "mongodb": "tasks-store-mongo",
}


def scheme_of(url_or_name: str) -> str:
    """The lookup name of a URL or store name: ``"postgresql+asyncpg://…"`` ->
    ``"postgresql"``, ``"mongodb+srv://…"`` -> ``"mongodb"``, ``"memory"`` -> ``"memory"``.

    Raises:
        UnknownStore: empty input.
    """
    if not isinstance(url_or_name, str) or not url_or_name.strip():
        raise UnknownStore("A store URL or name is required, e.g. 'sqlite:///tasks.db'")
    scheme = url_or_name.split("://", 1)[0] if "://" in url_or_name else url_or_name
    return scheme.split("+", 1)[0].strip().lower()


def _entry_points(name: str | None = None) -> list[EntryPoint]:
    found = entry_points(group=PROJECT)
    return [ep for ep in found if name is None or ep.name == name]


def _distribution(ep: EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else f"<unknown distribution of {ep.value}>"


def _miss(name: str) -> UnknownStore:
    installed = sorted({ep.name for ep in _entry_points()})
    hint = KNOWN_DISTRIBUTIONS.get(name)
    parts = [f"No installed store plugin serves {name!r}."]
    if hint:
        parts.append(f"Install it with: {install_hint(hint)}.")
    close = difflib.get_close_matches(name, sorted({*installed, *KNOWN_DISTRIBUTIONS}), n=1)
    if close and close[0] != name:
        parts.append(f"Did you mean {close[0]!r}?")
    elif not hint:  # a third party's: name the convention, never a package to trust
        parts.append(f"Store plugins of other publishers are distributions named "
                     f"tasks-store-<name> by convention (entry point group 'tasks'); "
                     f"install the one for {name!r} from a publisher you trust.")
    parts.append(f"Installed: {', '.join(installed) or 'none'}.")
    return UnknownStore(" ".join(parts))


def _specs(pm: pluggy.PluginManager) -> list[StoreSpec]:
    specs: list[StoreSpec] = []
    for result in pm.hook.tasks_stores():
        specs.extend(result if isinstance(result, list) else [result])
    return specs


def find_store(url_or_name: str) -> StoreSpec:
    """Load the one plugin serving ``url_or_name`` and return its spec.

    Raises:
        UnknownStore: no installed plugin serves it (says what to install, and "did you
            mean").
        PluginConflict: two distributions claim it (names both).
    """
    name = scheme_of(url_or_name)
    eps = _entry_points(name)
    if not eps:
        raise _miss(name)
    matching = [s for s in _loaded(name) if name == s.name or name in s.schemes]
    if not matching:
        raise UnknownStore(f"The plugin {_distribution(eps[0])} declares {name!r} but serves "
                           "no such store")
    return matching[0]


def _loaded(name: str) -> list[StoreSpec]:
    """The specs of the one plugin of entry-point ``name``, imported only once no other
    distribution claims the name.

    Raises:
        PluginConflict: two distributions claim it (names both).
    """
    dists = sorted({_distribution(ep) for ep in _entry_points(name)})
    if len(dists) > 1:
        raise PluginConflict(
            f"Store {name!r} is claimed by several distributions: {', '.join(dists)}; "
            "uninstall all but one"
        )
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(_Hooks)
    pm.load_setuptools_entrypoints(PROJECT, name=name)
    return _specs(pm)


def available_stores() -> list[StoreSpec]:
    """Load every installed store plugin (for ``tasks backends``).

    Raises:
        PluginConflict: two distributions claim one store name (an entry-point name, or
            the name of the store a plugin declares).
    """
    by_name: dict[str, StoreSpec] = {}
    owners: dict[str, str] = {}
    for name in sorted({ep.name for ep in _entry_points()}):
        for spec in _loaded(name):
            previous = owners.setdefault(spec.name, spec.distribution)
            if previous != spec.distribution:
                raise PluginConflict(
                    f"Store {spec.name!r} is claimed by {previous} and {spec.distribution}"
                )
            by_name[spec.name] = spec
    return [by_name[n] for n in sorted(by_name)]


class _Opening:
    """``await open_store(...)`` or ``async with open_store(...) as store``."""

    def __init__(self, url_or_name: str, options: dict[str, Any]) -> None:
        self._url = url_or_name
        self._options = options
        self._store: TaskStore | None = None

    async def _open(self) -> TaskStore:
        # the plugin's import (SQLAlchemy, Alembic: seconds on a busy machine) in a thread,
        # so that it never freezes the event loop of the application opening the store
        spec = await asyncio.to_thread(find_store, self._url)
        url = self._url if "://" in self._url else f"{self._url}://"
        return await spec.factory(url, **self._options)

    def __await__(self) -> Generator[Any, None, TaskStore]:
        return self._open().__await__()

    async def __aenter__(self) -> TaskStore:
        self._store = await self._open()
        return self._store

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._store is not None:
            await self._store.aclose()


def open_store(url_or_name: str, **options: Any) -> _Opening:
    """Open the store serving ``url_or_name`` (``"memory://"``, ``"sqlite:///f.db"``…).

    Loads only the plugin asked for. Use ``store = await open_store(url)`` (then
    ``await store.aclose()``) or ``async with open_store(url) as store``.

    Raises:
        UnknownStore: no installed plugin serves it; the message names the distribution.
        PluginConflict: two distributions claim it.
        InvalidInput: an option the store does not know.
    """
    return _Opening(url_or_name, options)
