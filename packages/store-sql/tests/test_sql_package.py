"""The tasks-store-sql skeleton installs, imports, and claims no store scheme yet."""

from __future__ import annotations

from importlib.metadata import distribution

import pytest
import tasks_store_sql
from tasks_core import UnknownStore, find_store


def test_skeleton_imports_and_says_it_is_not_implemented() -> None:
    """The package MUST import and say in its docstring that the store is not built yet."""
    assert "Not implemented yet" in (tasks_store_sql.__doc__ or "")


def test_skeleton_declares_no_store_plugin() -> None:
    """A skeleton MUST NOT declare a ``tasks`` entry point: it cannot serve a scheme yet."""
    entry_points = distribution("tasks-store-sql").entry_points
    assert [ep.name for ep in entry_points if ep.group == "tasks"] == []


def test_url_of_the_scheme_says_what_to_install() -> None:
    """``find_store("sqlite:///x.db")`` MUST raise UnknownStore naming tasks-store-sql."""
    with pytest.raises(UnknownStore, match="pip install tasks-store-sql"):
        find_store("sqlite:///x.db")
