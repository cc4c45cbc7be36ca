"""The tasks-store-mongo skeleton installs, imports, and claims no store scheme yet."""

from __future__ import annotations

from importlib.metadata import distribution

import pytest
import tasks_store_mongo
from tasks_core import UnknownStore, find_store


def test_skeleton_imports_and_says_it_is_not_implemented() -> None:
    """The package MUST import and say in its docstring that the store is not built yet."""
    assert "Not implemented yet" in (tasks_store_mongo.__doc__ or "")


def test_skeleton_declares_no_store_plugin() -> None:
    """A skeleton MUST NOT declare a ``tasks`` entry point: it cannot serve a scheme yet."""
    entry_points = distribution("tasks-store-mongo").entry_points
    assert [ep.name for ep in entry_points if ep.group == "tasks"] == []


def test_url_of_the_scheme_says_what_to_install() -> None:
    """``find_store("mongodb://localhost")`` MUST raise UnknownStore naming tasks-store-mongo."""
    with pytest.raises(UnknownStore, match="pip install tasks-store-mongo"):
        find_store("mongodb://localhost")
