"""``python -m tasks_core.cli``: the ``tasks`` command."""

from __future__ import annotations

import sys

from tasks_core.cli.main import main

sys.exit(main())
