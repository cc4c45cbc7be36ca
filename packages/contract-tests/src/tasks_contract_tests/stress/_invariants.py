"""The invariant checker: what the store kept, compared with what every process recorded.

Pure functions over plain data — :class:`TaskFacts` (read from the store after the run)
and ledger :class:`~tasks_contract_tests.stress._ledger.Entry` rows — so the checker is
tested with fabricated inputs. Every check is an exact count with an exact expected value;
none looks at a duration.

The store is the authority on outcomes (what is terminal, with which result, through
which claim); the ledgers say what the processes did (which runs started and ended, which
claims they got, what the store answered them). Neither is trusted alone: a run the
ledger shows but the store does not, or an outcome no recorded run produced, is a failure.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tasks_core import EventRecord, Snapshot

from tasks_contract_tests.stress._ledger import Entry

__all__ = [
    "Check",
    "HistoryEvent",
    "TaskFacts",
    "check_cas",
    "check_recovery",
    "check_runs",
    "summary_counts",
]

TERMINAL = frozenset({"completed", "failed", "cancelled"})
CONFLICTS = frozenset({"RevisionConflict", "LeaseLost"})
MAX_EXAMPLES = 5


@dataclass(frozen=True)
class HistoryEvent:
    """One applied event of a task's history: its kind, id, and the status it left."""

    kind: str
    event_id: str
    status: str


@dataclass(frozen=True)
class TaskFacts:
    """What the store says about one task after the run.

    Attributes:
        generation: the generation of the last claim (``None``: never claimed).
        lease_live: a lease on it was still live when the facts were read.
        recovered: the last claim took over an expired lease.
    """

    id: str
    status: str
    result: Any = None
    error: str | None = None
    deliveries: int = 0
    retry_count: int = 0
    generation: int | None = None
    lease_live: bool = False
    recovered: bool = False
    events: tuple[HistoryEvent, ...] = ()
    answers: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, snapshot: Snapshot, history: Sequence[EventRecord], now: datetime) -> TaskFacts:
        """The facts of ``snapshot`` and its ``history`` read at store time ``now``."""
        claim = snapshot.claim
        return cls(
            id=snapshot.id,
            status=snapshot.status.value,
            result=snapshot.result,
            error=snapshot.error.type if snapshot.error else None,
            deliveries=snapshot.deliveries,
            retry_count=snapshot.retry_count,
            generation=claim.generation if claim else None,
            lease_live=snapshot.lease_live(now),
            recovered=bool(claim and claim.recovered),
            events=tuple(HistoryEvent(r.kind, r.event_id, r.status.value) for r in history),
            answers=dict(snapshot.accepted_input_responses),
        )

    @property
    def terminal_events(self) -> list[HistoryEvent]:
        """The history records that left the task terminal (exactly one when finished)."""
        return [e for e in self.events if e.status in TERMINAL]


@dataclass(frozen=True)
class Check:
    """One exact invariant: ``actual`` must equal ``expected``."""

    name: str
    description: str
    expected: int
    actual: int
    examples: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the invariant holds."""
        return self.expected == self.actual

    def as_dict(self) -> dict[str, Any]:
        """JSON form for the report."""
        return {"name": self.name, "description": self.description, "ok": self.ok,
                "expected": self.expected, "actual": self.actual,
                "examples": list(self.examples)}


def _check(name: str, description: str, offenders: Iterable[str], expected: int = 0) -> Check:
    found = sorted(set(offenders))
    return Check(name, description, expected, len(found), tuple(found[:MAX_EXAMPLES]))


def _count(name: str, description: str, actual: int, expected: int) -> Check:
    return Check(name, description, expected, actual)


def _of(entries: Iterable[Entry], kind: str) -> list[Entry]:
    return [e for e in entries if e.kind == kind]


# -- the runner workloads ----------------------------------------------------------------


def check_runs(
    tasks: Mapping[str, TaskFacts],
    entries: Sequence[Entry],
    *,
    killed: Collection[int] = (),
    faults: bool = False,
) -> list[Check]:
    """The invariants of a run of workers (the soak and every chaos scenario).

    Args:
        tasks: the store's facts by task id (every task of the run's namespace).
        entries: every ledger row of the run.
        killed: pids the harness SIGKILLed (their runs may lack an ``end``, their claims
            a ``claim`` row).
        faults: connections were cut or the database restarted (a claim may have committed
            while its answer was lost).
    """
    killed = set(killed)
    expected = {e.task_id: e.details() for e in _of(entries, "submit") if e.task_id}
    starts = {e.nonce: e for e in _of(entries, "start") if e.nonce}
    ends = {e.nonce: e for e in _of(entries, "end") if e.nonce}
    checks = [
        _check("lost", "submitted tasks missing from the store or not finished",
               (t for t in expected if t not in tasks or tasks[t].status not in TERMINAL)),
        _check("phantom", "tasks in the store that nobody submitted",
               (t for t in tasks if t not in expected)),
        _check("unexpected_outcome", "finished tasks that ended otherwise than they must",
               _wrong_outcomes(tasks, expected, entries)),
        _check("doubled", "tasks with more than one outcome recorded",
               _doubled(tasks, entries)),
        _check("overwritten", "results not produced by the run holding the last claim "
                              "(a stale worker's outcome)", _overwritten(tasks, ends)),
        _check("unmatched_starts", "handler runs that started and never ended (outside "
                                   "killed processes)",
               (f"{s.task_id}#{n}" for n, s in starts.items()
                if n not in ends and s.pid not in killed)),
        _check("ends_without_start", "handler runs that ended without a start",
               (f"{e.task_id}#{n}" for n, e in ends.items() if n not in starts)),
        _check("runs_without_claim", "handler runs without a claim of that delivery",
               _runs_without_claim(entries)),
        _check("claims_forgotten", "claims a worker got that the store's delivery count "
                                   "does not show", _claims_forgotten(tasks, entries)),
        _check("busy_workers", "workers that did not exit cleanly after the drain, and "
                               "leases still live at the end", _busy(tasks, entries, killed)),
        _check("bad_inputs_accepted", "invalid requests that were not refused",
               (f"{e.task_id}:{e.details().get('what')}" for e in _of(entries, "bad")
                if e.outcome not in e.details().get("expect", []))),
        _check("applied_but_absent", "outcomes the store said it applied that the history "
                                     "does not hold", _applied_but_absent(tasks, entries)),
    ]
    if not killed and not faults:
        checks.append(_check(
            "unrecorded_claims", "deliveries no worker recorded a claim for (no process was "
                                 "killed, no connection cut)",
            (t for t, n in _unrecorded(tasks, entries).items() if n > 0)))
    return checks


def _wrong_outcomes(
    tasks: Mapping[str, TaskFacts], expected: Mapping[str, dict[str, Any]],
    entries: Sequence[Entry],
) -> list[str]:
    answers: dict[str, str] = {}
    for e in _of(entries, "respond"):
        if e.task_id and e.nonce and e.outcome in ("applied", "duplicate"):
            answers[e.task_id] = e.nonce
    wrong = []
    for task_id, want in expected.items():
        facts = tasks.get(task_id)
        if facts is None or facts.status not in TERMINAL:
            continue  # counted as lost
        if facts.status != want.get("status"):
            wrong.append(f"{task_id}: {facts.status}, not {want.get('status')}")
        elif facts.retry_count != want.get("retries", 0):
            wrong.append(f"{task_id}: {facts.retry_count} retries, not {want.get('retries')}")
        elif facts.status == "failed" and want.get("error") not in (None, facts.error):
            wrong.append(f"{task_id}: error {facts.error}, not {want.get('error')}")
        elif facts.status == "completed" and not _names_a_run(facts.result):
            wrong.append(f"{task_id}: result does not name a run")
        elif want.get("answered") and (
            task_id not in answers
            or not isinstance(facts.result, dict)
            or facts.result.get("answer") != {"token": answers[task_id]}
        ):
            wrong.append(f"{task_id}: result does not carry the client's answer")
    return wrong


def _names_a_run(result: Any) -> bool:
    return isinstance(result, dict) and isinstance(result.get("nonce"), str) \
        and isinstance(result.get("delivery"), int)


def _doubled(tasks: Mapping[str, TaskFacts], entries: Sequence[Entry]) -> list[str]:
    doubled = [t for t, f in tasks.items() if len(f.terminal_events) > 1]
    applied: dict[str, set[str]] = defaultdict(set)
    for e in _of(entries, "write"):
        if e.task_id and e.nonce and e.outcome == "applied" and e.detail in ("completed",
                                                                              "failed"):
            applied[e.task_id].add(e.nonce)
    doubled += [t for t, ids in applied.items() if len(ids) > 1]
    return doubled


def _overwritten(tasks: Mapping[str, TaskFacts], ends: Mapping[str, Entry]) -> list[str]:
    bad = []
    for task_id, facts in tasks.items():
        if facts.status != "completed" or not _names_a_run(facts.result):
            continue
        nonce, delivery = facts.result["nonce"], facts.result["delivery"]
        end = ends.get(nonce)
        if delivery != facts.deliveries:
            bad.append(f"{task_id}: result of delivery {delivery}, last claim {facts.deliveries}")
        elif end is None or end.task_id != task_id or end.outcome != "returned" \
                or end.delivery != delivery:
            bad.append(f"{task_id}: no recorded run returned this result")
    return bad


def _runs_without_claim(entries: Sequence[Entry]) -> list[str]:
    claims = {(e.pid, e.task_id, e.delivery) for e in _of(entries, "claim")}
    return [f"{e.task_id}#{e.nonce}" for e in _of(entries, "start")
            if (e.pid, e.task_id, e.delivery) not in claims]


def _recorded_claims(entries: Sequence[Entry]) -> Counter[str]:
    return Counter(t for t, _ in {(e.task_id, e.generation) for e in _of(entries, "claim")
                                  if e.task_id})


def _claims_forgotten(tasks: Mapping[str, TaskFacts], entries: Sequence[Entry]) -> list[str]:
    recorded = _recorded_claims(entries)
    return [t for t, n in recorded.items() if t not in tasks or tasks[t].deliveries < n]


def _unrecorded(tasks: Mapping[str, TaskFacts], entries: Sequence[Entry]) -> dict[str, int]:
    recorded = _recorded_claims(entries)
    return {t: f.deliveries - recorded.get(t, 0) for t, f in tasks.items()}


def _busy(tasks: Mapping[str, TaskFacts], entries: Sequence[Entry],
          killed: Collection[int]) -> list[str]:
    workers = {e.pid for e in entries if e.role == "worker"}
    exits = {e.pid: e.outcome for e in _of(entries, "exit")}
    busy = [f"worker pid {pid}: exit {exits.get(pid, 'missing')}" for pid in sorted(workers)
            if pid not in killed and exits.get(pid) != "0"]
    busy += [f"{t}: lease still live" for t, f in tasks.items() if f.lease_live]
    return busy


def _applied_but_absent(tasks: Mapping[str, TaskFacts], entries: Sequence[Entry]) -> list[str]:
    absent = []
    for e in _of(entries, "write"):
        if e.outcome != "applied" or not e.task_id:
            continue
        facts = tasks.get(e.task_id)
        if facts is None or e.nonce not in {h.event_id for h in facts.events}:
            absent.append(f"{e.task_id}: {e.detail} {e.nonce}")
    return absent


ENDING = frozenset({"completed", "failed", "retry_requested"})


def check_recovery(
    tasks: Mapping[str, TaskFacts], entries: Sequence[Entry], *, killed: Collection[int]
) -> list[Check]:
    """After SIGKILLs: the tasks whose last claim took over an expired lease are exactly
    the tasks a killed worker left holding a lease (a claim it never ended) plus those
    whose claim it never got to record — the delivery count says what happened.

    A killed worker's claim whose ending write committed but was not recorded is
    recognised by the store: no later claim exists and the task is finished.
    """
    killed = set(killed)
    ended = {(e.pid, e.task_id, e.generation) for e in entries
             if (e.kind == "write" and e.detail in ENDING
                 and e.outcome in ("applied", "duplicate"))
             or (e.kind == "release" and e.outcome == "ok")}
    left: set[str] = set()
    for e in _of(entries, "claim"):
        if e.pid in killed and e.task_id and (e.pid, e.task_id, e.generation) not in ended:
            facts = tasks.get(e.task_id)
            if facts is None or facts.generation != e.generation:
                left.add(e.task_id)
    unrecorded = {t for t, n in _unrecorded(tasks, entries).items() if n > 0}
    expected = left | unrecorded
    recovered = {t for t, f in tasks.items() if f.recovered}
    return [_check("recovery_explained", "tasks recovered after a lease expired that no "
                                         "killed worker explains, and the reverse",
                   (f"{t}: {'recovered' if t in recovered else 'not recovered'}"
                    for t in expected ^ recovered))]


def summary_counts(
    tasks: Mapping[str, TaskFacts], entries: Sequence[Entry], *, killed: Collection[int] = ()
) -> dict[str, int]:
    """Figures for the report: what happened, in counts (not invariants)."""
    statuses = Counter(f.status for f in tasks.values())
    starts = {e.nonce for e in _of(entries, "start")}
    ended = {e.nonce for e in _of(entries, "end")}
    writes = _of(entries, "write")
    return {
        "tasks": len(tasks),
        "completed": statuses["completed"],
        "failed": statuses["failed"],
        "cancelled": statuses["cancelled"],
        "retries": sum(f.retry_count for f in tasks.values()),
        "deliveries": sum(f.deliveries for f in tasks.values()),
        "redelivered": sum(1 for f in tasks.values() if f.deliveries > 1),
        "recovered": sum(1 for f in tasks.values() if f.recovered),
        "runs": len(starts),
        "interrupted_runs": len(starts - ended),
        "parked_runs": sum(1 for e in _of(entries, "end") if e.outcome == "parked"),
        "shutdown_stops": sum(1 for e in _of(entries, "end") if e.outcome == "stopped:shutdown"),
        "stale_writes_refused": sum(1 for e in writes if e.outcome == "LeaseLost"),
        "answers": len(_of(entries, "respond")),
        "cancels": len(_of(entries, "cancel")),
        "bad_inputs": len(_of(entries, "bad")),
        "unrecorded_claims": sum(max(n, 0) for n in _unrecorded(tasks, entries).values()),
        "killed_processes": len(set(killed)),
    }


# -- CAS contention ----------------------------------------------------------------------


def check_cas(
    tasks: Mapping[str, TaskFacts],
    entries: Sequence[Entry],
    *,
    task_ids: Collection[str],
    writers: int,
    phases: Sequence[str] = ("revision", "terminal"),
) -> list[Check]:
    """The invariants of the CAS contention workload.

    For each task and phase, ``writers`` processes sent one event each at the same
    revision through the same lease: exactly one is applied, every other one hears a
    conflict (``RevisionConflict`` or ``LeaseLost``), nothing else happens, and the store's
    history holds exactly the winner's event.
    """
    rows = [e for e in _of(entries, "cas") if e.task_id in task_ids]
    count = len(task_ids)
    checks: list[Check] = []
    for phase in phases:
        mine = [e for e in rows if e.detail == phase]
        applied = [e for e in mine if e.outcome == "applied"]
        conflicts = [e for e in mine if e.outcome in CONFLICTS]
        checks += [
            _count(f"{phase}_applied", f"{phase} phase: writes applied (one per task)",
                   len(applied), count),
            _count(f"{phase}_conflicts", f"{phase} phase: writes refused as conflicts "
                                         "(tasks × (writers − 1))",
                   len(conflicts), count * (writers - 1)),
            _check(f"{phase}_unexpected", f"{phase} phase: answers other than applied or a "
                                          "conflict",
                   (f"{e.task_id}: {e.outcome}" for e in mine
                    if e.outcome != "applied" and e.outcome not in CONFLICTS)),
            _check(f"{phase}_not_one_winner", f"{phase} phase: tasks without exactly one "
                                              "applied write",
                   (str(t) for t, n in Counter(e.task_id for e in applied).items() if n != 1)),
        ]
        winners = {e.task_id: e.nonce for e in applied}
        kind = "input_requested" if phase == "revision" else "completed"
        checks.append(_check(
            f"{phase}_history", f"{phase} phase: tasks whose history does not hold exactly "
                                "the winner's event",
            (t for t in task_ids
             if [h.event_id for h in tasks[t].events if h.kind == kind] != [winners.get(t)])
            if all(t in tasks for t in task_ids) else task_ids,
        ))
    checks += [
        _check("lost", "tasks missing from the store or not finished",
               (t for t in task_ids if t not in tasks or tasks[t].status not in TERMINAL)),
        _check("doubled", "tasks with more than one outcome recorded",
               (t for t in task_ids if t in tasks and len(tasks[t].terminal_events) > 1)),
        _check("overwritten", "results that are not the terminal winner's",
               _cas_overwritten(tasks, rows, task_ids)),
        _count("writes_recorded", "writes every writer recorded (writers × tasks × phases)",
               len(rows), writers * count * len(phases)),
    ]
    return checks


def _cas_overwritten(
    tasks: Mapping[str, TaskFacts], rows: Sequence[Entry], task_ids: Collection[str]
) -> list[str]:
    winners = {e.task_id: e.nonce for e in rows
               if e.detail == "terminal" and e.outcome == "applied"}
    bad = []
    for task_id in task_ids:
        facts = tasks.get(task_id)
        nonce = winners.get(task_id)
        if facts is None or facts.status != "completed" or nonce is None:
            continue
        writer = int(nonce.split(":")[1])
        if facts.result != {"writer": writer}:
            bad.append(f"{task_id}: result {facts.result!r}, winner writer {writer}")
    return bad
