"""The shape of ``tasks_core``: no import cycles, small modules, short module docstrings.

Every module of the package is parsed (never imported) and its imports of ``tasks_core``
read from the syntax tree — those under ``if TYPE_CHECKING:`` and inside functions too, so
a cycle cannot hide behind a type-only or a late import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tasks_core

ROOT = Path(tasks_core.__file__).parent
MAX_LINES = 450
MAX_DOCSTRING_LINES = 12

_REBUILT_ELSEWHERE: set[str] = set()
"""Modules (and packages) skipped by the size and docstring checks while a rebuild is
under way (none)."""

_LONG_DOCSTRING_ALLOWED = {"tasks_core.errors"}
"""Modules whose docstring is longer on purpose: errors.py draws the whole error tree there
(STYLE.md), and test_errors checks the drawing against the classes."""

_EDGES_REBUILT_ELSEWHERE: set[tuple[str, str]] = set()
"""Imports left out of the cycle check while a rebuild is under way (none)."""


def _modules() -> dict[str, Path]:
    """Every module of tasks_core by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module of ``tasks_core`` that ``name`` (a module or a name in one) is."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> set[str]:
    """The modules of tasks_core that ``module`` imports, wherever the import is."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(filter(None, (_owner(alias.name) for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            for alias in node.names:  # `from pkg import module` imports that module
                owner = _owner(f"{base}.{alias.name}") if f"{base}.{alias.name}" in MODULES \
                    else _owner(base)
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


def _rebuilt_elsewhere(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in _REBUILT_ELSEWHERE)


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
    assert {"tasks_core.runtime.app", "tasks_core.errors", "tasks_core.clock"} == _imports(
        "tasks_core.probe", source)


def test_tasks_core_has_no_import_cycle() -> None:
    """No module of tasks_core imports itself through others, type-only imports included."""
    graph = {module: _imports(module, path) for module, path in MODULES.items()}
    for source, target in _EDGES_REBUILT_ELSEWHERE:
        graph[source].discard(target)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_module_is_at_most_450_lines() -> None:
    """A module does one job: at most ``MAX_LINES`` lines."""
    too_long = {
        module: lines for module, path in MODULES.items() if not _rebuilt_elsewhere(module)
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert {} == too_long


def test_every_module_docstring_is_at_most_12_lines() -> None:
    """A module docstring says what the module is for and its rules, in one screen."""
    too_long = {}
    for module, path in MODULES.items():
        if _rebuilt_elsewhere(module) or module in _LONG_DOCSTRING_ALLOWED:
            continue
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        if docstring is not None and len(docstring.strip().splitlines()) > MAX_DOCSTRING_LINES:
            too_long[module] = len(docstring.strip().splitlines())
    assert {} == too_long
