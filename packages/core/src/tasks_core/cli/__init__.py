"""The ``tasks`` command line: ``tasks = "tasks_core.cli:main"``.

:mod:`~tasks_core.cli.main` parses and dispatches, ``_commands`` runs each command,
``_render`` draws tables and progress bars, ``_signals`` turns SIGTERM/SIGINT into a drain,
and :mod:`~tasks_core.cli.demo` is ``tasks demo``. The CLI is a client of the runtime.
"""

from __future__ import annotations

from tasks_core.cli.main import build_parser, load_app, main, run

__all__ = ["build_parser", "load_app", "main", "run"]
