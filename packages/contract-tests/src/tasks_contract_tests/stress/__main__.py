"""``python -m tasks_contract_tests.stress --store URL [--json] [--small] [--out FILE]``."""

from __future__ import annotations

import sys

from tasks_contract_tests.stress._cli import main

if __name__ == "__main__":
    sys.exit(main())
