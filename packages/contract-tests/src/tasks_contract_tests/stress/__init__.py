"""``tasks stress``: multi-process stress workloads with exact invariants.

::

    tasks stress --store postgresql://… [--json] [--small]
    python -m tasks_contract_tests.stress --store sqlite:///stress.db --json --out report.json

Two workloads, CAS contention and the runner soak (:mod:`._workloads`), each with real OS
processes that open their own store connections, in a fresh namespace of the store,
bounded in time, checked exactly afterwards (:mod:`._invariants`). The JSON report has
``"ok": true`` only when every invariant holds. The chaos scenarios
(:mod:`tasks_contract_tests.chaos`) reuse this machinery with faults injected.
"""

from __future__ import annotations

from tasks_contract_tests.stress._cli import StressSizes, main, main_async, run_stress
from tasks_contract_tests.stress._invariants import Check, TaskFacts, check_cas, check_runs
from tasks_contract_tests.stress._ledger import Entry, Ledger, read_ledgers

__all__ = [
    "Check",
    "Entry",
    "Ledger",
    "StressSizes",
    "TaskFacts",
    "check_cas",
    "check_runs",
    "main",
    "main_async",
    "read_ledgers",
    "run_stress",
]
