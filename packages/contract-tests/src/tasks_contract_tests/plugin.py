"""The pytest plugin (entry point ``pytest11``): ``--tasks-store-url``.

Inert unless ``--tasks-store-url`` is given or a ``StoreContract`` subclass is collected:
it only adds an option. With the option, it adds the bundled URL suite to the run. A failed
``==`` of two tasks models is reported field by field (:mod:`tasks_contract_tests._diff`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

URL_SUITE = Path(__file__).with_name("_url_suite.py")


def pytest_assertrepr_compare(op: str, left: object, right: object) -> list[str] | None:
    """A failed ``==`` of tasks models: the fields that differ (see ``_diff``)."""
    if op != "==":
        return None
    from tasks_contract_tests._diff import model_diff

    return model_diff(left, right)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tasks", "tasks store contract suite")
    group.addoption(
        "--tasks-store-url",
        action="store",
        default=None,
        metavar="URL",
        help="run the tasks store contract suite against the store at URL",
    )


def pytest_configure(config: pytest.Config) -> None:
    url = config.getoption("--tasks-store-url", default=None)
    if url and str(URL_SUITE) not in config.args:
        config.args.append(str(URL_SUITE))
