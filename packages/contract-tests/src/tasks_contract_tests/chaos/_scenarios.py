"""The chaos scenarios: real worker processes, a fault, and the invariants afterwards.

Every scenario runs in a fresh namespace with its own fleet (see
:func:`tasks_contract_tests.stress._outcome.bounded`), ends with a drain of every worker
and the runner invariants of :func:`~tasks_contract_tests.stress._invariants.check_runs`
(nothing lost, nothing doubled, no result overwritten, every start matched by an end
outside killed processes, no worker left busy), plus checks of its own that prove the
fault really hit what it was meant to hit. Leases are short (1.5 s) so that recovery
after a kill is quick; no check looks at a duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import TracebackType

from tasks_core import Owner, RetryPolicy, Snapshot

from tasks_contract_tests.chaos._database import (
    can_restart_postgresql,
    cut_connections,
    other_clients,
    restart_postgresql,
    sqlite_path,
)
from tasks_contract_tests.stress._collect import retrying, wait_until
from tasks_contract_tests.stress._handlers import KINDS, Kind, build_app
from tasks_contract_tests.stress._invariants import Check, check_recovery
from tasks_contract_tests.stress._ledger import Entry, Ledger
from tasks_contract_tests.stress._outcome import Body, Outcome
from tasks_contract_tests.stress._procs import Child, Fleet
from tasks_contract_tests.stress._target import Target
from tasks_contract_tests.stress._workloads import SoakSizes, finish_runs, soak_workload

__all__ = ["LEASE", "Driver", "connections", "kill_in_backoff", "kill_in_input_wait",
           "kill_running", "sigterm_drain", "stale_worker"]

LEASE = 1.5
WAIT = 90.0
CHAOS = Owner("chaos")


def worker_args(*, concurrency: int = 4, input_park: float = 1.0) -> list[str]:
    """A chaos worker: short leases."""
    return ["--lease", str(LEASE), "--concurrency", str(concurrency), "--input-park",
            str(input_park)]


class Driver:
    """The harness's own client: submits and answers, recording both in its ledger."""

    def __init__(self, target: Target, fleet: Fleet) -> None:
        self.ledger = Ledger(fleet.directory / "harness.ledger", "harness")
        self.app = build_app(url=target.url, store_options=target.options)

    async def __aenter__(self) -> Driver:
        await self.app.open()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.app.aclose()
        self.ledger.close()

    async def submit(self, name: str, kind: Kind, count: int,
                     retry: RetryPolicy | None = None) -> list[str]:
        """Submit ``count`` tasks of ``kind`` (rows ``submit`` with what each must end as)."""
        ids = []
        for index in range(count):
            submitted = await retrying(lambda index=index: self.app.submit(  # type: ignore[misc]
                kind.task, kind.input, CHAOS, key=f"{name}-{index}", retry=retry))
            self.ledger.record("submit", submitted.id, outcome=submitted.outcome,
                               detail=kind.expectation(name))
            ids.append(submitted.id)
        return ids

    async def respond(self, task_id: str) -> None:
        """Answer ``approve`` with a fresh token (row ``respond``)."""
        token = secrets.token_hex(6)
        result = await retrying(lambda: self.app.respond(
            task_id, {"approve": {"token": token}}, CHAOS))
        self.ledger.record("respond", task_id, nonce=token, outcome=result.outcome)

    async def snapshots(self, ids: Iterable[str]) -> list[Snapshot]:
        """The tasks, now."""
        return [await retrying(lambda t=t: self.app.get(t, CHAOS))  # type: ignore[misc]
                for t in ids]

    async def wait_finished(self, ids: list[str], timeout: float = WAIT) -> None:
        """Wait until every task of ``ids`` is terminal."""
        async def finished() -> bool:
            return all(s.terminal for s in await self.snapshots(ids))

        await wait_until(finished, timeout=timeout, what="every task finished", every=0.2)


async def _ledger_shows(child: Child, test: Callable[[list[Entry]], bool], what: str,
                        timeout: float = WAIT) -> None:
    async def probe() -> bool:
        return test(child.entries())

    await wait_until(probe, timeout=timeout, what=f"{child.name}: {what}", every=0.05)


def _open_runs(entries: list[Entry]) -> set[str]:
    ended = {e.nonce for e in entries if e.kind == "end"}
    return {e.task_id for e in entries if e.kind == "start" and e.nonce not in ended
            and e.task_id}


def _writes(entries: list[Entry], kind: str, outcome: str) -> set[str]:
    return {e.task_id for e in entries
            if e.kind == "write" and e.detail == kind and e.outcome == outcome and e.task_id}


# -- the scenarios -----------------------------------------------------------------------


async def kill_running(target: Target, fleet: Fleet, outcome: Outcome) -> None:
    """SIGKILL a worker while it runs four tasks; another worker recovers them after their
    leases expire (delivery 2, ``recovered``), nothing lost."""
    async with Driver(target, fleet) as driver:
        first = await fleet.spawn("worker", *worker_args(concurrency=4))
        held = await driver.submit("hold", replace(KINDS["plain"], task="stress.hold",
                                                   input={"seconds": 30.0, "once": True}), 4)
        plain = await driver.submit("plain", KINDS["plain"], 8)
        await _ledger_shows(first, lambda es: set(held) <= _open_runs(es),
                            "runs every held task")
        await fleet.kill(first)
        await fleet.spawn("worker", *worker_args())
        await driver.wait_finished(held + plain)
    facts, entries = await finish_runs(target, fleet, outcome)
    interrupted = _open_runs([e for e in entries if e.pid == first.pid])
    outcome.checks += check_recovery(facts, entries, killed=fleet.killed)
    outcome.checks += [
        Check("kill_interrupted_runs", "held tasks whose first run the kill interrupted",
              len(held), len(interrupted & set(held))),
        Check("redelivered_once", "held tasks delivered exactly twice", len(held),
              sum(1 for t in held if facts[t].deliveries == 2)),
    ]
    outcome.tried["tasks"] = len(held) + len(plain)


async def stale_worker(target: Target, fleet: Fleet, outcome: Outcome) -> None:
    """SIGSTOP a worker past its lease, let another worker finish its tasks, SIGCONT it:
    its late completions are refused (``LeaseLost``) and the newer outcomes stand."""
    async with Driver(target, fleet) as driver:
        stale = await fleet.spawn("worker", *worker_args(concurrency=2))
        ids = await driver.submit("stall", replace(KINDS["plain_sync"], task="stress.stall",
                                                   input={"seconds": 8.0}), 2)
        await _ledger_shows(stale, lambda es: set(ids) <= _open_runs(es), "runs both tasks")
        fleet.signal(stale, signal.SIGSTOP)
        try:
            await fleet.spawn("worker", *worker_args())
            await driver.wait_finished(ids)
        finally:
            fleet.signal(stale, signal.SIGCONT)
        await _ledger_shows(stale, lambda es: set(ids) <= _writes(es, "completed", "LeaseLost"),
                            "has its late completions refused")
    facts, entries = await finish_runs(target, fleet, outcome)
    kept = sum(1 for t in ids if isinstance(facts[t].result, dict)
               and facts[t].result.get("pid") == stale.pid)
    refused = _writes([e for e in entries if e.pid == stale.pid], "completed", "LeaseLost")
    outcome.checks += [
        Check("stale_completions_refused", "tasks whose stale completion the store refused "
                                           "with LeaseLost", len(ids), len(refused & set(ids))),
        Check("stale_outcomes_kept", "outcomes overwritten by a stale worker", 0, kept),
    ]
    outcome.figures["stale_outcomes_kept"] = kept
    outcome.tried["tasks"] = len(ids)


async def kill_in_backoff(target: Target, fleet: Fleet, outcome: Outcome) -> None:
    """SIGKILL a worker while its tasks wait out a retry backoff: another worker runs the
    retries when due; no retry lost, none counted twice."""
    async with Driver(target, fleet) as driver:
        first = await fleet.spawn("worker", *worker_args())
        flaky = replace(KINDS["flaky"], input={"fails": 1}, retries=1)
        ids = await driver.submit("flaky", flaky, 3, retry=RetryPolicy.fixed(4.0, attempts=3))
        await _ledger_shows(first, lambda es: set(ids) <= _writes(es, "retry_requested",
                                                                  "applied"),
                            "asked for every retry")
        await fleet.kill(first)
        await fleet.spawn("worker", *worker_args())
        await driver.wait_finished(ids)
    facts, entries = await finish_runs(target, fleet, outcome)
    claims_by_first = [e for e in entries if e.kind == "claim" and e.pid == first.pid]
    outcome.checks += check_recovery(facts, entries, killed=fleet.killed)
    outcome.checks.append(Check(
        "killed_in_backoff", "tasks the killed worker had claimed exactly once (it died "
                             "during their backoff)", len(ids),
        sum(1 for t in ids if sum(1 for e in claims_by_first if e.task_id == t) == 1)))
    outcome.tried["tasks"] = len(ids)


async def kill_in_input_wait(target: Target, fleet: Fleet, outcome: Outcome) -> None:
    """SIGKILL a worker while its runs wait for input; answer; another worker recovers the
    tasks after lease expiry and gets the stored answers without asking again."""
    async with Driver(target, fleet) as driver:
        first = await fleet.spawn("worker", *worker_args(input_park=60.0))
        ids = await driver.submit("ask", KINDS["ask"], 2)
        ids += await driver.submit("ask_sync", KINDS["ask_sync"], 1)
        await _ledger_shows(first, lambda es: set(ids) <= _writes(es, "input_requested",
                                                                  "applied"),
                            "asked every question")
        await fleet.kill(first)
        for task_id in ids:
            await driver.respond(task_id)
        await fleet.spawn("worker", *worker_args())
        await driver.wait_finished(ids)
    facts, entries = await finish_runs(target, fleet, outcome)
    outcome.checks += check_recovery(facts, entries, killed=fleet.killed)
    outcome.checks.append(Check(
        "asked_once", "tasks whose history holds exactly one input request", len(ids),
        sum(1 for t in ids if [e.kind for e in facts[t].events].count("input_requested") == 1)))
    outcome.tried["tasks"] = len(ids)


async def sigterm_drain(target: Target, fleet: Fleet, outcome: Outcome) -> None:
    """SIGTERM a busy worker: its running tasks stop for ``shutdown`` and are released (not
    cancelled), the backlog stays pending; a new worker finishes everything."""
    async with Driver(target, fleet) as driver:
        first = await fleet.spawn("worker", *worker_args(concurrency=2))
        held = await driver.submit("hold", replace(KINDS["plain"], task="stress.hold",
                                                   input={"seconds": 60.0, "once": True}), 2)
        await _ledger_shows(first, lambda es: set(held) <= _open_runs(es), "runs both tasks")
        backlog = await driver.submit("plain", KINDS["plain"], 6)
        fleet.signal(first, signal.SIGTERM)
        code = await first.wait(60)
        middle = await driver.snapshots(held + backlog)
        await fleet.spawn("worker", *worker_args())
        await driver.wait_finished(held + backlog)
    _, entries = await finish_runs(target, fleet, outcome)
    mine = [e for e in entries if e.pid == first.pid]
    released = {e.task_id for e in mine if e.kind == "release" and e.outcome == "ok"}
    stopped = {e.task_id for e in mine if e.kind == "end" and e.outcome == "stopped:shutdown"}
    outcome.checks += [
        Check("drain_exit_code", "exit code of the drained worker (0: settled)", 0,
              -1 if code is None else code),
        Check("finished_by_the_drain", "tasks the drain finished (cancelled, failed…)", 0,
              sum(1 for s in middle if s.terminal)),
        Check("released_for_shutdown", "running tasks that stopped for `shutdown` and were "
                                       "released", len(held), len(stopped & released & set(held))),
        Check("backlog_pending", "backlog tasks left pending by the drain", len(backlog),
              sum(1 for s in middle if s.id in backlog and s.status.value == "pending")),
    ]
    outcome.tried["tasks"] = len(held) + len(backlog)


def connections(sizes: SoakSizes) -> Body:
    """A soak while the database is hurt: PostgreSQL connections of the workers and the
    client terminated (``pg_terminate_backend``) and the server restarted; MariaDB
    connections killed (``KILL``); SQLite's other writer killed while holding the write
    lock mid-transaction. Workers reconnect; nothing lost, nothing doubled."""

    async def body(target: Target, fleet: Fleet, outcome: Outcome) -> None:
        family = target.family
        if family not in ("postgresql", "mariadb", "sqlite"):
            outcome.skipped = f"no database faults for {family} in this harness"
            return
        if family == "sqlite" and sqlite_path(target.url) is None:
            outcome.skipped = "an in-memory SQLite database has no other writer"
            return
        inject = _sqlite_faults if family == "sqlite" else _server_faults
        run: Body = soak_workload(sizes, deadline=240, inject=inject, faults=True)
        try:
            await run(target, fleet, outcome)
        finally:
            path = sqlite_path(target.url)
            if path is not None:
                with contextlib.suppress(sqlite3.Error):
                    db = sqlite3.connect(path, timeout=30)
                    db.execute("DROP TABLE IF EXISTS chaos_other_writer")
                    db.close()

    return body


async def _server_faults(target: Target, fleet: Fleet, outcome: Outcome) -> None:
    family = target.family
    why_not = can_restart_postgresql(target.url) if family == "postgresql" else \
        "restarting MariaDB is not part of this scenario"
    for round_ in range(6):
        await asyncio.sleep(1.5)
        pids = [c.pid for c in fleet.children if c.alive]
        outcome.tried["connections_cut"] = outcome.tried.get("connections_cut", 0) + \
            await cut_connections(target.url, family, pids)
        if round_ == 2 and family == "postgresql":
            others = await other_clients(target.url, pids) if why_not is None else 0
            if others:
                why_not = f"{others} other client(s) of the server were connected"
            if why_not is None:
                await restart_postgresql(target.url)
                outcome.tried["restarts"] = outcome.tried.get("restarts", 0) + 1
            else:
                outcome.notes.append(f"no server restart: {why_not}")
    if family == "mariadb":
        outcome.notes.append(f"no server restart: {why_not}")


async def _sqlite_faults(target: Target, fleet: Fleet, outcome: Outcome) -> None:
    for _ in range(4):
        await asyncio.sleep(1.5)
        other = await fleet.spawn("other_writer", module="tasks_contract_tests.chaos."
                                  "_other_writer", ready=None)
        await other.expect("holding", 60)
        await asyncio.sleep(0.5)
        await fleet.kill(other)
    outcome.notes.append("kills: another process killed while holding SQLite's write lock "
                         "mid-transaction")

