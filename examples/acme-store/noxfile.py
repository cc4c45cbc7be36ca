"""The store author's own checks: the contract suite against this store, as its CI runs it.

`nox` installs the tasks distributions (from TASKS_SOURCE, a clone of tasks, until they
are on PyPI), this store with its test extra, then runs the suite both ways: by test file
(`tests/`) and by URL (`python -m tasks_contract_tests --store-url acme://`). A store
with a real server would start it here, or in the CI workflow, before the sessions run.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

HERE = Path(__file__).parent
TASKS = Path(os.environ.get("TASKS_SOURCE", HERE.parent.parent))
"""A clone of tasks (default: the repository this example lives in)."""
DISTRIBUTIONS = ("packages/core", "packages/store-memory", "packages/contract-tests")

nox.options.sessions = ["contract"]


@nox.session
def contract(session: nox.Session) -> None:
    """The contract suite against this store: by test file, then by URL."""
    session.install(*(str(TASKS / name) for name in DISTRIBUTIONS))
    session.install(f"{HERE}[test]")
    session.run("pytest", str(HERE / "tests"), *session.posargs)
    session.run("python", "-m", "tasks_contract_tests", "--store-url", "acme://",
                *session.posargs)
