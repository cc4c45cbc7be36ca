"""The shape of every package: no import cycles, small modules, short module docstrings.

The packages are found from this file's place in the repository (``packages/*/src/*`` and
``examples/*/src/*``) and their modules parsed, never imported, so the check runs in any
package's test session. A module's imports of its own package are read from the syntax
tree — those under ``if TYPE_CHECKING:`` and inside functions too, so a cycle cannot hide
behind a type-only or a late import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[3]
MAX_LINES = 450
MAX_DOCSTRING_LINES = 12

PACKAGES = {
    init.parent.name: init.parent
    for pattern in ("packages/*/src/*/__init__.py", "examples/*/src/*/__init__.py")
    for init in sorted(REPOSITORY.glob(pattern))
}
"""Every import package of the repository's distributions, by name: its source folder."""

_LONG_DOCSTRING_ALLOWED = {"tasks_core.errors"}
"""Modules whose docstring is longer on purpose: errors.py draws the whole error tree there
(STYLE.md), and test_errors checks the drawing against the classes."""

_EDGES_REBUILT_ELSEWHERE: set[tuple[str, str]] = set()
"""Imports left out of the cycle check while a rebuild is under way (none)."""


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the package in ``root`` by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The module of ``modules`` that ``name`` (a module or a name in one) is."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``module`` imports, wherever the import is."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(filter(None, (_owner(alias.name, modules) for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            for alias in node.names:  # `from pkg import module` imports that module
                name = f"{base}.{alias.name}"
                owner = _owner(name if name in modules else base, modules)
                if owner is not None:
                    found.add(owner)
    found.discard(module)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as ``[a, b, ..., a]``, or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (found := visit(target)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def _docstring_lines(path: Path) -> int:
    """How many lines the module docstring of ``path`` has (0 without one)."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    return len(docstring.strip().splitlines()) if docstring else 0


def test_every_package_is_found() -> None:
    """The check below sees every distribution's package, the example store's too."""
    assert {"tasks_core", "tasks_store_memory", "tasks_store_sql", "tasks_store_mongo",
            "tasks_contract_tests", "tasks_store_acme", "tasks_dashboard"} <= set(PACKAGES)


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check below can fail: a cycle through three modules is found and reported."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert ["a", "b", "c", "a"] == _cycle(graph)
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_import_reader_sees_type_only_and_local_imports(tmp_path: Path) -> None:
    """Imports under ``if TYPE_CHECKING:`` and inside functions count as imports."""
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tasks_core.runtime.app import App\n"
        "def f():\n    import tasks_core.errors\n    from tasks_core import clock\n")
    modules = {**_modules(PACKAGES["tasks_core"]), "tasks_core.probe": source}
    assert {"tasks_core.runtime.app", "tasks_core.errors", "tasks_core.clock"} == _imports(
        "tasks_core.probe", source, modules)


def test_the_import_reader_resolves_relative_imports(tmp_path: Path) -> None:
    """``from . import b`` and ``from ..c import d`` name modules of the same package."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    for name in ("__init__.py", "c.py", "sub/__init__.py", "sub/b.py"):
        (root / name).write_text("")
    (root / "sub" / "a.py").write_text("from . import b\nfrom ..c import d\n")
    modules = _modules(root)
    assert {"pkg.sub.b", "pkg.c"} == _imports("pkg.sub.a", root / "sub" / "a.py", modules)


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycle(package: str) -> None:
    """No module of the package imports itself through others, type-only imports included."""
    modules = _modules(PACKAGES[package])
    graph = {module: _imports(module, path, modules) for module, path in modules.items()}
    for source, target in _EDGES_REBUILT_ELSEWHERE:
        graph.get(source, set()).discard(target)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_module_is_at_most_450_lines(package: str) -> None:
    """A module does one job: at most ``MAX_LINES`` lines."""
    too_long = {
        module: lines for module, path in _modules(PACKAGES[package]).items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert {} == too_long


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_module_docstring_is_at_most_12_lines(package: str) -> None:
    """A module docstring says what the module is for and its rules, in one screen."""
    too_long = {
        module: lines for module, path in _modules(PACKAGES[package]).items()
        if module not in _LONG_DOCSTRING_ALLOWED
        if (lines := _docstring_lines(path)) > MAX_DOCSTRING_LINES
    }
    assert {} == too_long


def test_every_distribution_ships_the_repository_license() -> None:
    """Every distribution's folder MUST hold the repository's LICENSE, unchanged: its wheel
    and sdist take it from there (the license its metadata names, Apache-2.0, requires the
    text to reach whoever installs it; none shipped one)."""
    text = (REPOSITORY / "LICENSE").read_text(encoding="utf-8")
    folders = sorted(path.parent for pattern in ("packages/*/pyproject.toml",
                                                 "examples/*/pyproject.toml")
                     for path in REPOSITORY.glob(pattern))
    assert len(folders) == len(PACKAGES)  # one import package each
    assert [] == [str(folder.relative_to(REPOSITORY)) for folder in folders
                  if not (folder / "LICENSE").is_file()
                  or (folder / "LICENSE").read_text(encoding="utf-8") != text]
