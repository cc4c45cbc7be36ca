"""The *other writer* of a SQLite file: ``python -m tasks_contract_tests.chaos._other_writer
--store sqlite:///FILE …`` takes the write lock mid-transaction and waits to be killed."""

from __future__ import annotations

import argparse
import sys

from tasks_contract_tests.chaos._database import hold_write_lock, sqlite_path
from tasks_contract_tests.stress._target import add_options_argument


def main(argv: list[str] | None = None) -> int:
    """Hold the lock until killed."""
    parser = argparse.ArgumentParser(prog="python -m tasks_contract_tests.chaos._other_writer")
    add_options_argument(parser)
    path = sqlite_path(parser.parse_args(argv).store)
    if path is None:
        return 2
    hold_write_lock(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
