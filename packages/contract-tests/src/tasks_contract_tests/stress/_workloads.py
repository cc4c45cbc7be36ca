"""The two stress workloads: CAS contention and the runner soak.

Both run real OS processes, each with its own store connections, in a namespace of their
own, and end with exact invariants read from the store and the ledgers.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tasks_core import NewTask, Work

from tasks_contract_tests.stress._collect import collect, retrying, snapshots, wait_until
from tasks_contract_tests.stress._handlers import QUEUE
from tasks_contract_tests.stress._invariants import (
    Check,
    TaskFacts,
    check_cas,
    check_runs,
    summary_counts,
)
from tasks_contract_tests.stress._ledger import Entry, read_ledgers
from tasks_contract_tests.stress._outcome import Body, Outcome
from tasks_contract_tests.stress._procs import Fleet
from tasks_contract_tests.stress._target import HarnessError, Target

__all__ = ["Injector", "SoakSizes", "cas_workload", "finish_runs", "soak_workload"]

PHASE_TIMEOUT = 120.0
Injector = Callable[[Target, Fleet, Outcome], Awaitable[None]]
"""A fault schedule run beside the soak's client (chaos scenarios)."""


def cas_workload(tasks: int, writers: int) -> Body:
    """CAS contention: ``writers`` processes race one event per task and phase at the same
    revision through the same lease (see ``_writer``) → exactly ``tasks`` applied,
    ``tasks × (writers − 1)`` conflicts, exactly one committed event per task, no
    unexpected answer (two phases: ``input_requested`` and ``completed``)."""

    async def body(target: Target, fleet: Fleet, outcome: Outcome) -> None:
        store = await target.open()
        try:
            leases = []
            for index in range(tasks):
                new = NewTask(id=f"cas-{index}", tenant="default", owner=None, queue=QUEUE,
                              work=Work(name="stress.cas"))
                await store.create(new)
                claim = await store.claim(new.id, "stress-harness", lease_for=3600)
                leases.append(claim.lease.model_dump(mode="json"))
            path = fleet.directory / "leases.json"
            path.write_text(json.dumps(leases))
            children = await asyncio.gather(*(
                fleet.spawn("writer", "--leases", str(path), "--index", str(w))
                for w in range(writers)
            ))
            for _phase in ("revision", "terminal"):
                for child in children:
                    await child.tell("go")
                for child in children:
                    await child.expect("phase-done", PHASE_TIMEOUT)
            codes = [await child.wait(60) for child in children]
            facts = await collect(store)
        finally:
            await store.aclose()
        entries = read_ledgers(fleet.directory)
        ids = [f"cas-{i}" for i in range(tasks)]
        outcome.checks = check_cas(facts, entries, task_ids=ids, writers=writers)
        outcome.checks.append(Check("writer_exits", "writers that exited 0", writers,
                                    sum(1 for code in codes if code == 0)))
        answers = Counter(str(e.outcome) for e in entries if e.kind == "cas")
        outcome.figures = {"writes": sum(answers.values()), **dict(sorted(answers.items()))}
        outcome.tried["tasks"] = tasks

    return body


@dataclass(frozen=True)
class SoakSizes:
    """Sizes of a runner soak.

    Attributes:
        workers: worker processes.
        rounds: rounds submitted one after the other.
        tasks: tasks per round.
        concurrency: runs at once per worker.
        lease: lease seconds (heartbeats every lease/3).
        input_park: seconds a run waits for an answer before parking.
        seed: the client's random seed (the mix of kinds, when to answer and cancel).
        prefetch: ``N`` of ``--prefetch N``: the workers take turns at ``--prefetch 0``,
            ``N`` and ``auto`` (the default), so the invariants are checked in every mode.
    """

    workers: int = 4
    rounds: int = 3
    tasks: int = 32
    concurrency: int = 4
    lease: float = 2.0
    input_park: float = 1.0
    seed: int = 0
    prefetch: int = 2

    def worker_args(self, index: int) -> list[str]:
        """Command-line arguments of worker process ``index`` (``--prefetch``: 0, N and
        ``auto`` in turn)."""
        prefetch = ("0", str(self.prefetch), "auto")[index % 3]
        return ["--lease", str(self.lease), "--concurrency", str(self.concurrency),
                "--input-park", str(self.input_park), "--prefetch", prefetch]


def soak_workload(sizes: SoakSizes, *, deadline: float,
                  inject: Injector | None = None, faults: bool = False) -> Body:
    """The runner soak: workers drain rounds submitted by a client process (some tasks
    retry, some ask for input, some are cancelled, some fail), optionally while ``inject``
    breaks things; then a drain and the invariants: every task terminal as it must be,
    none lost, none completed twice, no result overwritten, every handler start matched by
    an end, no worker left busy.

    Args:
        sizes: the sizes.
        deadline: seconds the client may take for every round.
        inject: a fault schedule run beside the client.
        faults: ``inject`` cuts connections (claims may commit unrecorded).
    """

    async def body(target: Target, fleet: Fleet, outcome: Outcome) -> None:
        await asyncio.gather(*(fleet.spawn("worker", *sizes.worker_args(index))
                               for index in range(sizes.workers)))
        client = await fleet.spawn("client", "--rounds", str(sizes.rounds), "--tasks",
                                   str(sizes.tasks), "--seed", str(sizes.seed), "--deadline",
                                   str(deadline))
        injecting = asyncio.ensure_future(inject(target, fleet, outcome) if inject
                                          else asyncio.sleep(0))
        try:
            code = await client.wait(deadline + 30)
            await injecting
        finally:
            injecting.cancel()
        if code != 0:
            raise HarnessError(f"the client exited with {code} (3: its deadline passed; see "
                               f"{client.log})")
        await finish_runs(target, fleet, outcome, faults=faults)
        outcome.tried["tasks"] = sizes.rounds * sizes.tasks

    return body


async def finish_runs(
    target: Target, fleet: Fleet, outcome: Outcome, *, faults: bool = False, drain: float = 60.0
) -> tuple[dict[str, TaskFacts], list[Entry]]:
    """Wait until no lease is live, drain every worker (SIGTERM), and check the runs;
    return what the checks read (for a scenario's own checks)."""
    store = await target.open()
    try:
        async def settled() -> bool:
            now = await retrying(store.now)
            return not any(s.lease_live(now) for s in await snapshots(store))

        await wait_until(settled, timeout=60, what="every lease ended")
        await fleet.stop_all("worker", drain)
        facts = await collect(store)
    finally:
        await store.aclose()
    entries = read_ledgers(fleet.directory)
    outcome.checks = check_runs(facts, entries, killed=fleet.killed, faults=faults)
    outcome.figures = summary_counts(facts, entries, killed=fleet.killed)
    outcome.tried["bad_inputs"] = outcome.figures["bad_inputs"]
    return facts, entries
