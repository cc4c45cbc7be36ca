"""Mutation testing of the rules and the memory store: the helper of `nox -s mutants`.

mutmut mutates a copy, never the checkout: ``stage`` copies the packages' ``src/`` and the
killing tests (mutants.toml) into a scratch directory laid out as mutmut expects
(``src/``, ``tests/``, a ``pyproject.toml`` of its own); the session runs ``mutmut run``
there; ``check`` reads mutmut's results, compares the survivors with the equivalent
mutants listed in mutants.toml, prints the score by module, optionally writes it to the
"Mutation score" section of docs/contract.md (naming the commit the stage was copied from),
and fails on any survivor not listed.

    python mutants.py stage --root REPO --dest DIR
    python mutants.py check --dest DIR [--docs docs/contract.md] [--sample]
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
CONFIG = HERE / "mutants.toml"
BEGIN, END = "<!-- mutants:begin -->", "<!-- mutants:end -->"
STAGED = "staged-from.json"  # in the stage: the commit its copy was taken from
# mutmut's exit codes, folded into the three counts this project reports.
KILLED = {1, 3, 36, -24, 24, 152, 255, 37}  # a failing test, a timeout, a type error
SURVIVED = {0, 5, 33}  # every test passed, or no test ran it at all


def load() -> dict[str, Any]:
    return tomllib.loads(CONFIG.read_text("utf-8"))


def stage(root: Path, dest: Path) -> None:
    """Lay out ``dest`` for mutmut: ``src/`` (every package of ``sources``, whole),
    ``tests/<package>/…`` and a pyproject.toml naming the files to mutate."""
    config = load()["run"]
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "src").mkdir(parents=True)
    for source in config["sources"]:
        for package in sorted((root / source).iterdir()):
            if package.is_dir() and (package / "__init__.py").exists():
                shutil.copytree(package, dest / "src" / package.name,
                                ignore=shutil.ignore_patterns("__pycache__"))
    for test in config["tests"]:  # packages/<name>/tests/<rest> -> tests/<name>/<rest>
        parts = Path(test).parts
        target = dest / "tests" / parts[1] / Path(*parts[3:])
        if (root / test).is_dir():
            shutil.copytree(root / test, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / test, target)
    (dest / STAGED).write_text(json.dumps(staged_from(root, config)), "utf-8")
    only = ", ".join(json.dumps(f"src/{glob}") for glob in config["mutate"])
    (dest / "pyproject.toml").write_text(
        "# Written by packages/contract-tests/mutants/mutants.py stage: do not edit.\n"
        "[tool.mutmut]\n"
        'source_paths = ["src"]\n'
        f"only_mutate = [{only}]\n"
        'pytest_add_cli_args_test_selection = ["tests"]\n'
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]\n'
        "use_git_change_detection = false\n"
        f"do_not_mutate_patterns = {json.dumps(config.get('skip_lines', []))}\n"
        "\n[tool.pytest.ini_options]\n"
        'addopts = "--strict-markers"\n'
        "xfail_strict = true\n",
        "utf-8",
    )


def staged_from(root: Path, config: dict[str, Any]) -> dict[str, object]:
    """The commit of ``root`` (short hash; None outside git) and whether what the run
    reads — the sources, the tests, the contract suite — differed from it."""
    paths = [*config["sources"], *config["tests"], "packages/contract-tests/src"]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", *paths],
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "changed": False}
    return {"commit": commit, "changed": bool(status.strip())}


def results(dest: Path) -> dict[str, dict[str, int | None]]:
    """mutmut's exit code of every mutant, by source file (``tasks_core/rules/_access.py``)."""
    found = {}
    base = dest / "mutants" / "src"
    for meta in sorted(base.rglob("*.py.meta")):
        data = json.loads(meta.read_text("utf-8"))
        found[meta.relative_to(base).as_posix()[: -len(".meta")]] = data["exit_code_by_key"]
    return found


def mutated_lines(dest: Path, name: str, path: str) -> str:
    """mutmut's diff of ``name`` on one line: ``- old / + new`` (what the mutant changed)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant  # the session's mutmut

    cwd = Path.cwd()
    os.chdir(dest)
    try:
        diff = get_diff_for_mutant(name, path=Path("src") / path)
    finally:
        os.chdir(cwd)
    changed = [f"{line[0]} {line[1:].strip()}" for line in diff.splitlines()
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    return " / ".join(changed)


def selected(name: str, globs: Iterable[str]) -> bool:
    return any(name == glob or fnmatch.fnmatch(name, glob) for glob in globs)


def check(dest: Path, docs: Path | None, sample: bool) -> int:
    config = load()
    listed = {entry["name"]: entry for entry in config.get("equivalent", [])}
    globs = config["run"]["sample"] if sample else ["*"]
    rows, unlisted, stale, unchecked = [], [], [], 0
    for path, codes in results(dest).items():
        count: Counter[str] = Counter()
        for name, code in codes.items():
            if not selected(name, globs):
                continue
            if code is None:
                unchecked += 1
                continue
            if code in KILLED:
                count["killed"] += 1
                if name in listed:
                    stale.append(name)
                continue
            if code not in SURVIVED:
                count["suspicious"] += 1  # a crash of the test process: look at it
                unlisted.append((name, path, f"mutmut exit code {code}", ""))
                continue
            line = mutated_lines(dest, name, path)
            entry = listed.get(name)
            if entry is not None and entry.get("line") == line:
                count["equivalent"] += 1
            else:
                count["survived"] += 1
                why = "listed, but its line changed" if entry else "not listed as equivalent"
                unlisted.append((name, path, why, line))
        if count:
            rows.append((path, count))
    print(f"{'module':<40} {'killed':>7} {'survived':>9} {'equivalent':>11}")
    total: Counter[str] = Counter()
    for path, count in rows:
        total.update(count)
        print(f"{path:<40} {count['killed']:>7} {count['survived']:>9} {count['equivalent']:>11}")
    print(f"{'total':<40} {total['killed']:>7} {total['survived']:>9} {total['equivalent']:>11}")
    for name in stale:
        print(f"note: {name} is listed as equivalent but was killed: drop it from mutants.toml")
    if unchecked:
        print(f"error: {unchecked} mutants were not checked (mutmut stopped early?)")
    for name, path, why, line in unlisted:
        print(f"SURVIVED {name} ({path}): {why}\n    {line}")
    if docs is not None and not sample and not unchecked:
        staged = dest / STAGED
        origin = json.loads(staged.read_text("utf-8")) if staged.exists() else {}
        write_docs(docs, rows, total, config.get("equivalent", []), unlisted, origin)
    return 1 if unlisted or unchecked or not total else 0


def write_docs(docs: Path, rows: list[tuple[str, Counter[str]]], total: Counter[str],
               equivalent: list[dict[str, Any]],
               unlisted: list[tuple[str, str, str, str]], origin: dict[str, object]) -> None:
    """Replace the text between the mutants markers of ``docs`` with the score of the
    run staged from ``origin`` (``staged_from``)."""
    version = metadata.version("mutmut")
    of = f", of commit {origin['commit']}" if origin.get("commit") else ""
    if of and origin.get("changed"):
        of += " with uncommitted changes to what it staged"
    lines = [
        BEGIN,
        f"Last full run: {dt.date.today().isoformat()}, mutmut {version}{of}: every mutant "
        "has a result from this one run. Killed counts timeouts; survived counts mutants "
        "no test ran.",
        "",
        "| module | killed | survived | equivalent |",
        "|---|---:|---:|---:|",
        *(f"| `{path}` | {c['killed']} | {c['survived']} | {c['equivalent']} |"
          for path, c in rows),
        f"| **total** | **{total['killed']}** | **{total['survived']}** "
        f"| **{total['equivalent']}** |",
        "",
    ]
    by_reason: dict[str, list[str]] = {}
    for entry in equivalent:
        by_reason.setdefault(entry["reason"], []).append(entry["name"])
    if by_reason:
        lines += ["Equivalent mutants, by reason (each with its mutated line in "
                  "`packages/contract-tests/mutants/mutants.toml`):", ""]
        for reason, names in by_reason.items():
            lines.append(f"- {reason[:1].upper()}{reason[1:]}: "
                         + ", ".join(f"`{name}`" for name in names) + ".")
        lines.append("")
    if unlisted:
        lines += ["Survivors still to kill (`- old / + new`):", ""]
        lines += [f"- `{name}`: `{line or why}`" for name, _, why, line in unlisted]
        lines.append("")
    lines.append(END)
    text = docs.read_text("utf-8")
    if BEGIN not in text:  # the first run: a section of its own at the end
        text = text.rstrip("\n") + f"\n\n## Mutation score\n\n{BEGIN}\n{END}\n"
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    docs.write_text(text[:start] + "\n".join(lines) + text[stop:], "utf-8")
    print(f"wrote the score to {docs}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    staging = sub.add_parser("stage")
    staging.add_argument("--root", type=Path, required=True)
    staging.add_argument("--dest", type=Path, required=True)
    checking = sub.add_parser("check")
    checking.add_argument("--dest", type=Path, required=True)
    checking.add_argument("--docs", type=Path)
    checking.add_argument("--sample", action="store_true")
    sub.add_parser("sample")  # prints the sample's globs, one a line
    args = parser.parse_args(argv)
    if args.command == "stage":
        stage(args.root, args.dest)
        return 0
    if args.command == "sample":
        print("\n".join(load()["run"]["sample"]))
        return 0
    return check(args.dest, args.docs, args.sample)


if __name__ == "__main__":
    sys.exit(main())
