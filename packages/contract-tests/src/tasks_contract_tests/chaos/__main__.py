"""``python -m tasks_contract_tests.chaos --store URL [--scenario NAME]… [--json]``."""

from __future__ import annotations

import sys

from tasks_contract_tests.chaos._cli import main

if __name__ == "__main__":
    sys.exit(main())
