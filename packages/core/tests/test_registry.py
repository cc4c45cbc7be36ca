"""The store plugin registry: opening by URL, helpful misses, refused duplicates."""

from __future__ import annotations

from pathlib import Path

import pytest
from tasks_core import (
    InvalidInput,
    NewTask,
    PluginConflict,
    TaskStore,
    UnknownStore,
    Work,
    available_stores,
    find_store,
    open_store,
)
from tasks_core._registry import scheme_of


def _fake_distribution(root: Path, dist: str, entry: str, target: str) -> None:
    """Write ``<dist>-1.0.dist-info`` declaring ``entry = target`` in group ``tasks``."""
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[tasks]\n{entry} = {target}\n")


# -- opening -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_open_store_can_be_awaited() -> None:
    """``await open_store(url)`` MUST return an open store of the scheme's plugin."""
    store = await open_store("memory://")
    try:
        assert isinstance(store, TaskStore)
        assert find_store("memory://").capabilities == store.capabilities
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_open_store_is_an_async_context_manager() -> None:
    """``async with open_store(url) as store`` MUST yield a working store."""
    async with open_store("memory://", max_tasks=5) as store:
        created = await store.create(
            NewTask(id="k", tenant="default", owner=None, work=Work(name="job"))
        )
        assert created == await store.get("k", tenant=None)


@pytest.mark.anyio
async def test_a_bare_store_name_opens_too() -> None:
    """A store name without ``://`` MUST open like its URL."""
    async with open_store("memory") as store:
        assert isinstance(store, TaskStore)


@pytest.mark.anyio
async def test_unknown_options_are_refused() -> None:
    """An option the store does not know MUST raise InvalidInput."""
    with pytest.raises(InvalidInput, match="bogus"):
        await open_store("memory://", bogus=1)


def test_find_store_returns_the_spec_of_the_scheme() -> None:
    """``find_store`` MUST return the spec naming its distribution."""
    spec = find_store("memory://anything")
    assert ("memory", ("memory",), "tasks-store-memory") == (
        spec.name,
        spec.schemes,
        spec.distribution,
    )
    assert "memory" in [s.name for s in available_stores()]


# -- misses ------------------------------------------------------------------------------


def test_unknown_scheme_names_it_and_lists_what_is_installed() -> None:
    """An unknown scheme MUST raise UnknownStore naming it and the naming convention of
    third-party store distributions — without a command installing a package named after
    the user's text (a typo must not become an install) or a far-fetched "did you mean"."""
    with pytest.raises(UnknownStore) as info:
        find_store("nosuch://x")
    message = str(info.value)
    assert "No installed store plugin serves 'nosuch'." in message
    assert "memory" in message.split("Installed:")[1]
    assert "tasks-store-<name>" in message
    assert "pip install" not in message
    assert "Did you mean" not in message


def test_near_miss_suggests_the_installed_store() -> None:
    """A typo MUST get a "did you mean"."""
    with pytest.raises(UnknownStore, match="Did you mean 'memory'"):
        find_store("memroy://")


@pytest.mark.parametrize(
    ("url", "distribution"),
    [
        ("postgresql://localhost/db", "tasks-store-sql"),
        ("mongodb://localhost/db", "tasks-store-mongo"),
    ],
)
def test_known_first_party_scheme_says_what_to_install(
    url: str, distribution: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first-party scheme with nothing installed MUST name the distribution to install.

    The entry points are hidden so the rule is checked whatever this environment has."""
    from tasks_core import _registry

    monkeypatch.setattr(_registry, "entry_points", lambda group: [])
    with pytest.raises(UnknownStore, match=f"Install it with: pip install {distribution}") \
            as missing:
        find_store(url)
    package = distribution.removeprefix("tasks-")
    assert f"from a clone of the repository, pip install ./packages/{package})" in \
        str(missing.value)


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("postgresql+asyncpg://u@h/db", "postgresql"),
        ("mongodb+srv://cluster/x", "mongodb"),
        ("SQLite:///tasks.db", "sqlite"),
        ("memory", "memory"),
        ("memory://", "memory"),
    ],
)
def test_scheme_of_strips_drivers_and_case(url: str, scheme: str) -> None:
    """The lookup name MUST drop ``+driver`` and case."""
    assert scheme == scheme_of(url)


@pytest.mark.parametrize("url", ["", "   "])
def test_empty_url_is_refused(url: str) -> None:
    """An empty URL MUST raise UnknownStore with an example."""
    with pytest.raises(UnknownStore, match="required"):
        scheme_of(url)


# -- plugins -----------------------------------------------------------------------------


def test_two_distributions_claiming_one_name_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two installed distributions declaring ``acme`` MUST raise PluginConflict naming
    both, before either is imported — from ``find_store`` and from ``available_stores``
    (``tasks backends``), which must not show one and hide the other."""
    _fake_distribution(tmp_path, "acme-one", "acme", "acme_one_missing.plugin")
    _fake_distribution(tmp_path, "acme-two", "acme", "acme_two_missing.plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    for look_up in (lambda: find_store("acme://"), available_stores):
        with pytest.raises(PluginConflict) as info:
            look_up()
        assert "acme-one" in str(info.value)
        assert "acme-two" in str(info.value)


def test_plugin_that_declares_a_name_it_does_not_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin whose specs do not serve its entry-point name MUST raise UnknownStore."""
    (tmp_path / "liar_plugin.py").write_text(
        "from tasks_core import StoreSpec, hookimpl\n"
        "from tasks_store_memory import MemoryStore\n"
        "from tasks_store_memory.plugin import open_memory\n"
        "@hookimpl\n"
        "def tasks_stores():\n"
        "    return StoreSpec(name='other', schemes=('other',), factory=open_memory,\n"
        "                     capabilities=MemoryStore.CAPABILITIES, distribution='liar')\n"
    )
    _fake_distribution(tmp_path, "liar", "liar", "liar_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UnknownStore, match="declares 'liar' but serves no such store"):
        find_store("liar://")


@pytest.mark.anyio
async def test_a_plugin_is_imported_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``open_store`` and an ``App`` opening its store by URL MUST import the plugin in
    another thread: the first open of SQLite imported SQLAlchemy and Alembic on the loop,
    freezing every other request of a web app for seconds (an outside test)."""
    import sys
    import threading

    from tasks_core import App

    (tmp_path / "threaded_plugin.py").write_text(
        "import threading\n"
        "from tasks_core import StoreSpec, hookimpl\n"
        "from tasks_store_memory import MemoryStore\n"
        "from tasks_store_memory.plugin import open_memory\n"
        "IMPORTED_ON = threading.get_ident()\n"
        "async def factory(url, **options):\n"
        "    return await open_memory('memory://', **options)\n"
        "@hookimpl\n"
        "def tasks_stores():\n"
        "    return StoreSpec(name='threaded', schemes=('threaded',), factory=factory,\n"
        "                     capabilities=MemoryStore.CAPABILITIES, distribution='threaded')\n"
    )
    _fake_distribution(tmp_path, "threaded", "threaded", "threaded_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    loop_thread = threading.get_ident()
    for opening in ("open_store", "App"):
        sys.modules.pop("threaded_plugin", None)
        if opening == "open_store":
            await (await open_store("threaded://")).aclose()
        else:
            async with App("threaded://") as app:
                await app.open()
        assert loop_thread != sys.modules["threaded_plugin"].IMPORTED_ON, opening
