"""``python -m tasks_contract_tests --store-url URL [pytest args]``.

Runs the contract suite against the store at URL; exit code and summary are pytest's.
"""

from __future__ import annotations

import argparse
import sys

import pytest

from tasks_contract_tests.plugin import URL_SUITE


def main(argv: list[str] | None = None) -> int:
    """Run the suite; return pytest's exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m tasks_contract_tests",
        description="Run the tasks store contract suite against a store URL.",
        epilog="Any further arguments are passed to pytest (e.g. -k claim -x -q).",
    )
    parser.add_argument("--store-url", required=True, metavar="URL", help="e.g. memory://")
    args, pytest_args = parser.parse_known_args(argv)
    return int(
        pytest.main(
            [
                str(URL_SUITE),
                f"--tasks-store-url={args.store_url}",
                "-p",
                "no:cacheprovider",
                # `python -m` imported this package before pytest could mark it for assert
                # rewriting; the test modules themselves are still rewritten.
                "-W",
                "ignore:Module already imported so cannot be rewritten; tasks_contract_tests"
                ":pytest.PytestAssertRewriteWarning",
                f"--rootdir={URL_SUITE.parent}",
                *pytest_args,
            ]
        )
    )


if __name__ == "__main__":
    sys.exit(main())
