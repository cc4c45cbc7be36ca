"""No SQL is built by string formatting: every statement is a SQLAlchemy construct or a
literal ``text()`` with bound parameters.

The scan reads every module of the SQL store (and its tests) with ``ast`` and looks at the
SQL argument of ``text(...)``, ``.execute(...)``, ``.exec_driver_sql(...)`` and
``.executemany(...)`` calls — and, when that argument is a local name, at every value
assigned to the name in the same function. An f-string with placeholders, ``%``
formatting, ``.format(...)``, ``.join(...)`` or ``+`` with anything but string literals
is a failure naming the file and line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
SCANNED = [PACKAGE / "src", PACKAGE / "tests"]
SQL_CALLS = frozenset({"text", "execute", "exec_driver_sql", "executemany"})


def _formatted(node: ast.expr) -> str | None:
    """What string building ``node`` does, or ``None`` for a literal (or no string)."""
    if isinstance(node, ast.JoinedStr):
        if any(isinstance(part, ast.FormattedValue) for part in node.values):
            return "an f-string"
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and \
            isinstance(node.left, (ast.Constant, ast.JoinedStr, ast.BinOp)):
        return "%-formatting"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        parts = (node.left, node.right)
        if all(isinstance(p, ast.Constant) and isinstance(p.value, str) for p in parts):
            return None
        if any(_stringy(p) for p in parts):
            return "concatenation"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr in ("format", "join") and _stringy(node.func.value):
        return f"str.{node.func.attr}()"
    return None


def _stringy(node: ast.expr) -> bool:
    """Whether ``node`` is (or is built from) a string expression."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _stringy(node.left) or _stringy(node.right)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        node.func.attr in ("format", "join") and _stringy(node.func.value)


def _call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    if isinstance(node.func, ast.Name):
        return node.func.id
    return None


def _assignments(scope: ast.AST) -> dict[str, list[ast.expr]]:
    found: dict[str, list[ast.expr]] = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None:
            found.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            # ``sql += x`` appends to a string: judge it as ``"" + x``.
            grown = ast.BinOp(left=ast.Constant(""), op=node.op, right=node.value)
            found.setdefault(node.target.id, []).append(ast.copy_location(grown, node))
    return found


def _scopes(tree: ast.Module) -> Iterator[ast.AST]:
    yield tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield node


def findings_in(path: Path, root: Path = PACKAGE.parents[1]) -> list[str]:
    """Every SQL call in ``path`` whose SQL is built by string formatting, named relative
    to ``root``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for scope in _scopes(tree):
        names = _assignments(scope)
        for node in ast.walk(scope):
            if not isinstance(node, ast.Call) or _call_name(node) not in SQL_CALLS:
                continue
            if not node.args:
                continue
            sql = node.args[0]
            if isinstance(sql, ast.Call) and _call_name(sql) == "text":
                continue  # the text() call is looked at on its own
            candidates = names.get(sql.id, []) if isinstance(sql, ast.Name) else [sql]
            for candidate in candidates:
                how = _formatted(candidate)
                if how is not None:
                    where = path.relative_to(root)
                    found.add(f"{where}:{node.lineno}: {_call_name(node)}() of SQL built "
                              f"by {how} (line {candidate.lineno})")
    return sorted(found)


def test_no_sql_built_by_string_formatting() -> None:
    """No ``text()``/``execute()``/``exec_driver_sql()`` in the SQL store or its tests MAY
    take SQL built by an f-string, ``%``, ``.format()``, ``.join()`` or concatenation.

    Troubleshooting: use SQLAlchemy constructs (``sa.select``, ``sa.update``, DDL
    elements), or a literal ``text()`` with bound parameters (``:name``). Identifiers that
    must vary (a namespace prefix) belong in ``sa.Table``/``sa.MetaData`` objects, which
    quote them.
    """
    findings = [f for root in SCANNED for path in sorted(root.rglob("*.py"))
                for f in findings_in(path)]
    assert [] == findings


def test_the_scan_finds_every_kind_of_formatted_sql(tmp_path: Path) -> None:
    """The scan MUST flag each way of formatting SQL (so that a clean scan means
    something) and MUST NOT flag literals, bound parameters or SQLAlchemy constructs."""
    bad = '''
import sqlalchemy as sa
from sqlalchemy import text
async def f(conn, name, table):
    await conn.execute(sa.text(f"DROP TABLE {name}"))
    await conn.execute(text("SELECT * FROM %s" % table))
    await conn.exec_driver_sql("DELETE FROM {}".format(table))
    await conn.execute(text("SELECT " + name))
    stmt = f"UPDATE {table} SET x = 1"
    await conn.execute(text(stmt))
    query = "SELECT "
    query += name
    await conn.execute(text(query))
    await conn.execute(text(", ".join([name, table])))
'''
    good = '''
import sqlalchemy as sa
async def f(conn, t, value):
    await conn.execute(sa.text("SELECT 1 FROM x WHERE id = :id"), {"id": value})
    await conn.execute(sa.select(t.c.id).where(t.c.id == value))
    stmt = sa.update(t).values(x=1)
    await conn.execute(stmt)
    await conn.execute(sa.text("SELECT 1 " "FROM x"))
    await conn.execute(sa.text("SELECT 1 " + "FROM x"))
'''
    (tmp_path / "bad.py").write_text(bad)
    (tmp_path / "good.py").write_text(good)
    flagged = findings_in(tmp_path / "bad.py", tmp_path)
    clean = findings_in(tmp_path / "good.py", tmp_path)
    assert [] == clean
    assert [5, 6, 7, 8, 10, 13, 14] == sorted(int(f.split(":")[1]) for f in flagged)
