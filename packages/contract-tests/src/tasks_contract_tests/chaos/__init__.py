"""Chaos scenarios: kill, stop and starve real worker processes and the database, then
prove from the store that nothing was lost, doubled or overwritten.

::

    python -m tasks_contract_tests.chaos --store postgresql://… [--scenario NAME]… [--json]
    nox -s chaos

========================  ==================================================================
scenario                  what is done, and what must hold afterwards
========================  ==================================================================
``kill-running``          SIGKILL a worker mid-run; another recovers its tasks after lease
                          expiry (delivery 2, ``recovered``); nothing lost
``stale-worker``          SIGSTOP a worker past its lease, another finishes its tasks,
                          SIGCONT: its late completions are refused (``LeaseLost``) and the
                          newer outcomes stand — 0 outcomes overwritten by a stale worker
``kill-in-backoff``       SIGKILL a worker while its tasks wait out a retry backoff
``kill-in-input-wait``    SIGKILL a worker while its runs wait for input; answers survive
``sigterm-drain``         SIGTERM a busy worker: running tasks stop for ``shutdown`` and are
                          released, the backlog stays pending, nothing is cancelled
``connections``           a soak while PostgreSQL connections are terminated and the server
                          restarts, MariaDB connections are killed, or SQLite's other writer
                          dies holding the write lock: workers reconnect, nothing lost or
                          doubled
========================  ==================================================================

Linux only (signals, ``/proc``). Every scenario is bounded in time and reaps its processes.
"""

from __future__ import annotations

from tasks_contract_tests.chaos._cli import FAST, SCENARIOS, main, main_async, run_chaos

__all__ = ["FAST", "SCENARIOS", "main", "main_async", "run_chaos"]
