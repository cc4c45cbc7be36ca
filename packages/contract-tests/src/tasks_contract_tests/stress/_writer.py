"""A racing writer of the CAS contention workload::

    python -m tasks_contract_tests.stress._writer --store URL --options JSON --ledger FILE
        --leases FILE --index I

Every writer holds the same lease of every task and sends, phase after phase
(:data:`PHASES`), the same kind of event as every other writer at the same revision, with
an event id of its own; each answer is a ``cas`` row of its ledger.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from tasks_core import Completed, InputRequested, Lease, TasksError, open_store

from tasks_contract_tests.stress._ledger import Ledger
from tasks_contract_tests.stress._target import add_options_argument

PHASES = ("revision", "terminal")
"""``revision``: ``input_requested`` at revision 0 (the lease stays live, so every loser
must hear ``RevisionConflict``); ``terminal``: ``completed`` at revision 1 (the winner ends
the lease, so a loser hears ``LeaseLost`` — or ``RevisionConflict`` if it read first)."""


async def _race(args: argparse.Namespace, leases: list[Lease]) -> int:
    ledger = Ledger(args.ledger, "writer")
    store = await open_store(args.store, **json.loads(args.options))
    loop = asyncio.get_running_loop()
    try:
        await store.now()
        print("ready", flush=True)
        for revision, phase in enumerate(PHASES):
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if line.strip() != "go":
                return 2
            for lease in leases:
                event_id = f"cas:{args.index}:{phase}:{lease.task_id}"
                event = (
                    InputRequested(event_id=event_id, key=f"w{args.index}")
                    if phase == "revision"
                    else Completed(event_id=event_id, result={"writer": args.index})
                )
                try:
                    result = await store.transition(lease.task_id, revision, event, lease)
                except TasksError as exc:
                    outcome = type(exc).__name__
                else:
                    outcome = result.outcome
                ledger.record("cas", lease.task_id, generation=lease.generation, nonce=event_id,
                              outcome=outcome, detail=phase)
            print("phase-done", flush=True)
        return 0
    finally:
        await store.aclose()
        ledger.close()


def main(argv: list[str] | None = None) -> int:
    """Run one writer; return its exit code.

    The harness claimed every task once and wrote the leases to ``--leases``. The writer
    prints ``ready``; before each phase it waits for ``go`` on stdin, then sends its event
    task after task and prints ``phase-done``."""
    parser = argparse.ArgumentParser(prog="python -m tasks_contract_tests.stress._writer")
    add_options_argument(parser)
    parser.add_argument("--leases", required=True)
    parser.add_argument("--index", type=int, required=True)
    args = parser.parse_args(argv)
    leases = [Lease.model_validate(item) for item in json.loads(Path(args.leases).read_text())]
    return asyncio.run(_race(args, leases))


if __name__ == "__main__":
    sys.exit(main())
