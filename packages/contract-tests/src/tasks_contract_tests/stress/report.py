"""Write ``docs/reliability.md`` from the JSON reports of a run::

    python -m tasks_contract_tests.stress.report build/reliability/*.json > docs/reliability.md

The reports are what ``tasks stress --out FILE`` and ``python -m tasks_contract_tests.chaos
--out FILE`` write (``nox -s stress chaos`` puts them in ``build/reliability/``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tasks_contract_tests.stress._report import markdown

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Print the page for the given reports; exit 1 when one of them is not ``ok``."""
    parser = argparse.ArgumentParser(prog="python -m tasks_contract_tests.stress.report",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", metavar="REPORT.json")
    args = parser.parse_args(argv)
    reports = [json.loads(Path(path).read_text()) for path in args.reports]
    sys.stdout.write(markdown(reports) + "\n")
    return 0 if all(report["ok"] for report in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
