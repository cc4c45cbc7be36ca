"""Chaos scenarios: kill, stop and starve real worker processes and the database, then
prove from the store that nothing was lost, doubled or overwritten.

::

    python -m tasks_contract_tests.chaos --store postgresql://… [--scenario NAME]… [--json]
    nox -s chaos

:data:`SCENARIOS`: ``kill-running``, ``stale-worker``, ``kill-in-backoff``,
``kill-in-input-wait``, ``sigterm-drain``, ``connections`` (each one's function in
:mod:`._scenarios` says what is done and what must hold afterwards). Linux only (signals,
``/proc``). Every scenario is bounded in time and reaps its processes.
"""

from __future__ import annotations

from tasks_contract_tests.chaos._cli import FAST, SCENARIOS, main, main_async, run_chaos

__all__ = ["FAST", "SCENARIOS", "main", "main_async", "run_chaos"]
