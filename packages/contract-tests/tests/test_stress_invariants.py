"""The stress checker catches what it exists to catch.

Every test fabricates what the store kept (``TaskFacts``) and what the processes recorded
(ledger ``Entry`` rows) for a run that went right, proves that every invariant holds on
it, then breaks one thing — a doubled completion, a lost task, an outcome overwritten by
a stale worker, a run that never ended… — and proves that exactly the invariant meant to
catch it fails.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import replace

import pytest
from tasks_contract_tests.stress import Check, Entry, TaskFacts, check_cas, check_runs
from tasks_contract_tests.stress._invariants import HistoryEvent, check_recovery
from tasks_core import Completed, NewTask, Work
from tasks_store_memory import MemoryStore

WORKER, OTHER, CLIENT = 100, 200, 300


def submit(task_id: str, status: str = "completed", **expect: object) -> Entry:
    detail = {"kind": "plain", "status": status, "retries": 0, "error": None,
              "answered": False, **expect}
    return Entry(pid=CLIENT, role="client", kind="submit", task_id=task_id,
                 outcome="created", detail=json.dumps(detail))


def run(task_id: str, *, pid: int = WORKER, delivery: int = 1, nonce: str | None = None,
        end: str | None = "returned", write: str | None = "completed",
        written: str = "applied") -> list[Entry]:
    """The rows of one claim and its handler run (``end=None``: it never ended)."""
    nonce = nonce or f"{task_id}-{delivery}"
    rows = [
        Entry(pid=pid, role="worker", kind="claim", task_id=task_id, delivery=delivery,
              generation=delivery, nonce=f"w{pid}"),
        Entry(pid=pid, role="worker", kind="start", task_id=task_id, delivery=delivery,
              nonce=nonce),
    ]
    if end is not None:
        rows.append(Entry(pid=pid, role="worker", kind="end", task_id=task_id,
                          delivery=delivery, nonce=nonce, outcome=end))
    if write is not None:
        rows.append(Entry(pid=pid, role="worker", kind="write", task_id=task_id,
                          delivery=delivery, generation=delivery, outcome=written,
                          nonce=f"{task_id}:{delivery}:{write}", detail=write))
    return rows


def exited(pid: int = WORKER, code: str = "0") -> Entry:
    return Entry(pid=pid, role="worker", kind="exit", outcome=code)


def completed(task_id: str, *, delivery: int = 1, deliveries: int | None = None,
              pid: int = WORKER, **changes: object) -> TaskFacts:
    """A task completed by the run of ``delivery``."""
    facts = TaskFacts(
        id=task_id, status="completed",
        result={"pid": pid, "nonce": f"{task_id}-{delivery}", "delivery": delivery,
                "attempt": 1},
        deliveries=deliveries or delivery, generation=deliveries or delivery,
        events=(HistoryEvent("completed", f"{task_id}:{delivery}:completed", "completed"),),
    )
    return replace(facts, **changes)  # type: ignore[arg-type]


def clean() -> tuple[dict[str, TaskFacts], list[Entry]]:
    """Two tasks, each submitted, run once, completed; the worker drained cleanly."""
    tasks = {t: completed(t) for t in ("t1", "t2")}
    entries = [submit("t1"), submit("t2"), *run("t1"), *run("t2"), exited()]
    return tasks, entries


def failing(checks: Iterable[Check]) -> dict[str, int]:
    return {c.name: c.actual for c in checks if not c.ok}


def test_a_clean_run_passes_every_check() -> None:
    """The checker MUST pass a run in which nothing went wrong (else every catch below
    could be a checker that always fails).

    Troubleshooting: a check failing here has an off-by-one or reads a row kind the
    workers do not write.
    """
    tasks, entries = clean()
    assert {} == failing(check_runs(tasks, entries))


def test_a_doubled_completion_in_the_history_is_caught() -> None:
    """A task whose history holds two terminal records MUST fail ``doubled``."""
    tasks, entries = clean()
    second = HistoryEvent("completed", "t1:2:completed", "completed")
    tasks["t1"] = replace(tasks["t1"], events=(*tasks["t1"].events, second))
    assert {"doubled": 1} == failing(check_runs(tasks, entries))


def test_two_completions_both_reported_applied_are_caught() -> None:
    """Two different terminal writes a store said it applied to one task MUST fail
    ``doubled`` even when the history shows only one of them (the other one is also
    ``applied_but_absent``)."""
    tasks, entries = clean()
    entries += [*run("t1", pid=OTHER, delivery=2, nonce="late"), exited(OTHER)]
    tasks["t1"] = replace(tasks["t1"], deliveries=2)
    failed = failing(check_runs(tasks, entries))
    assert 1 == failed.pop("doubled")
    assert 1 == failed.pop("applied_but_absent")
    assert 1 == failed.pop("overwritten")  # the stored result is delivery 1's, not the last
    assert {} == failed


def test_a_lost_task_is_caught() -> None:
    """A submitted task missing from the store, or never finished, MUST fail ``lost``."""
    tasks, entries = clean()
    del tasks["t2"]
    entries = [e for e in entries if e.task_id != "t2" or e.kind == "submit"]
    assert {"lost": 1} == failing(check_runs(tasks, entries))
    tasks, entries = clean()
    tasks["t2"] = replace(tasks["t2"], status="pending", result=None, events=())
    failed = failing(check_runs(tasks, entries))
    assert 1 == failed["lost"]


def test_an_outcome_overwritten_by_a_stale_worker_is_caught() -> None:
    """A completed task whose stored result came from an earlier delivery than its last
    claim (the stale worker's write won) MUST fail ``overwritten``."""
    tasks, entries = clean()
    entries += [*run("t1", pid=OTHER, delivery=2, write=None), exited(OTHER)]
    tasks["t1"] = completed("t1", delivery=1, deliveries=2)
    assert {"overwritten": 1} == failing(check_runs(tasks, entries))


def test_a_result_no_recorded_run_returned_is_caught() -> None:
    """A result whose nonce no handler run recorded MUST fail ``overwritten``."""
    tasks, entries = clean()
    tasks["t1"] = replace(tasks["t1"], result={**tasks["t1"].result, "nonce": "forged"})
    assert {"overwritten": 1} == failing(check_runs(tasks, entries))


def test_a_run_that_never_ended_is_caught_unless_its_process_was_killed() -> None:
    """A start without an end MUST fail ``unmatched_starts`` — but not in a process the
    harness SIGKILLed, whose runs may end without a word."""
    tasks, entries = clean()
    entries.append(Entry(pid=WORKER, role="worker", kind="start", task_id="t1", delivery=1,
                         nonce="never-ended"))
    assert {"unmatched_starts": 1} == failing(check_runs(tasks, entries))
    entries = [e for e in entries if e.kind != "exit"]
    assert {} == failing(check_runs(tasks, entries, killed={WORKER}))


def test_a_worker_left_busy_is_caught() -> None:
    """A worker that did not exit 0 after the drain, or a lease still live at the end,
    MUST fail ``busy_workers``."""
    tasks, entries = clean()
    entries = [*entries[:-1], exited(code="1")]
    assert {"busy_workers": 1} == failing(check_runs(tasks, entries))
    tasks, entries = clean()
    tasks["t1"] = replace(tasks["t1"], lease_live=True)
    assert {"busy_workers": 1} == failing(check_runs(tasks, entries))


@pytest.mark.parametrize(
    ("expect", "facts"),
    [
        ({"status": "cancelled"}, {}),
        ({"retries": 2}, {}),
        ({"status": "failed", "error": "ValueError"},
         {"status": "failed", "error": "RuntimeError", "result": None}),
        ({"answered": True}, {}),
    ],
    ids=["status", "retries", "error", "answer"],
)
def test_a_task_that_ended_otherwise_than_it_must_is_caught(
    expect: dict[str, object], facts: dict[str, object]
) -> None:
    """A wrong status, retry count, error type or a missing answer MUST fail
    ``unexpected_outcome``."""
    tasks, entries = clean()
    entries[0] = submit("t1", **expect)
    tasks["t1"] = replace(tasks["t1"], **facts)  # type: ignore[arg-type]
    assert {"unexpected_outcome": 1} == failing(check_runs(tasks, entries))


def test_an_answered_task_carrying_the_clients_answer_passes() -> None:
    """The answer recorded by the client and carried in the result MUST pass."""
    tasks, entries = clean()
    entries[0] = submit("t1", answered=True)
    entries.append(Entry(pid=CLIENT, role="client", kind="respond", task_id="t1",
                         nonce="tok", outcome="applied"))
    tasks["t1"] = replace(tasks["t1"], result={**tasks["t1"].result, "answer": {"token": "tok"}})
    assert {} == failing(check_runs(tasks, entries))


def test_an_accepted_bad_input_is_caught() -> None:
    """A bad request that was not refused MUST fail ``bad_inputs_accepted``."""
    tasks, entries = clean()
    entries.append(Entry(pid=CLIENT, role="client", kind="bad", task_id="t1",
                         outcome="refused:InvalidInput",
                         detail='{"what": "a", "expect": ["refused:InvalidInput"]}'))
    assert {} == failing(check_runs(tasks, entries))
    entries.append(Entry(pid=CLIENT, role="client", kind="bad", task_id="t1",
                         outcome="accepted:created",
                         detail='{"what": "b", "expect": ["refused:InvalidInput"]}'))
    assert {"bad_inputs_accepted": 1} == failing(check_runs(tasks, entries))


def test_claims_the_store_does_not_count_are_caught() -> None:
    """More recorded claims than the store's delivery count MUST fail ``claims_forgotten``;
    more deliveries than recorded claims MUST fail ``unrecorded_claims`` unless a process
    was killed or connections were cut."""
    tasks, entries = clean()
    entries += [Entry(pid=OTHER, role="worker", kind="claim", task_id="t1", delivery=2,
                      generation=2), exited(OTHER)]
    assert {"claims_forgotten": 1} == failing(check_runs(tasks, entries))
    tasks, entries = clean()
    tasks["t1"] = completed("t1", delivery=2)  # delivery 1 was claimed, never recorded
    entries = [e for e in entries if e.task_id != "t1" or e.kind == "submit"]
    entries += run("t1", delivery=2)
    assert {"unrecorded_claims": 1} == failing(check_runs(tasks, entries))
    assert {} == failing(check_runs(tasks, entries, faults=True))


def test_recovery_must_be_explained_by_the_killed_worker() -> None:
    """After a kill, the recovered tasks MUST be exactly those the killed worker left
    holding a lease (``recovery_explained``)."""
    tasks = {"t1": completed("t1", delivery=2, recovered=True), "t2": completed("t2")}
    entries = [submit("t1"), submit("t2"), *run("t1", end=None, write=None),
               *run("t1", pid=OTHER, delivery=2), *run("t2"), exited(OTHER)]
    assert {} == failing(check_recovery(tasks, entries, killed={WORKER}))
    assert {} == failing(check_runs(tasks, entries, killed={WORKER}))
    unexplained = {**tasks, "t2": replace(tasks["t2"], recovered=True)}
    assert {"recovery_explained": 1} == failing(check_recovery(unexplained, entries,
                                                               killed={WORKER}))
    missed = {**tasks, "t1": replace(tasks["t1"], recovered=False)}
    assert {"recovery_explained": 1} == failing(check_recovery(missed, entries, killed={WORKER}))


# -- CAS contention ----------------------------------------------------------------------


def cas_world(writers: int = 3) -> tuple[dict[str, TaskFacts], list[Entry]]:
    """Two tasks; writer 0 wins both phases of both, the others hear conflicts."""
    entries, tasks = [], {}
    for task_id in ("c1", "c2"):
        for phase, loser in (("revision", "RevisionConflict"), ("terminal", "LeaseLost")):
            for w in range(writers):
                entries.append(Entry(pid=10 + w, role="writer", kind="cas", task_id=task_id,
                                     nonce=f"cas:{w}:{phase}:{task_id}", detail=phase,
                                     outcome="applied" if w == 0 else loser))
        tasks[task_id] = TaskFacts(
            id=task_id, status="completed", result={"writer": 0}, deliveries=1, generation=1,
            events=(HistoryEvent("input_requested", f"cas:0:revision:{task_id}",
                                 "waiting_input"),
                    HistoryEvent("completed", f"cas:0:terminal:{task_id}", "completed")))
    return tasks, entries


def test_a_clean_cas_race_passes_every_check() -> None:
    """One winner and W−1 conflicts per task and phase MUST pass."""
    tasks, entries = cas_world()
    assert {} == failing(check_cas(tasks, entries, task_ids=["c1", "c2"], writers=3))


def test_two_winners_of_one_cas_race_are_caught() -> None:
    """A second ``applied`` at the same revision MUST fail the phase's counts."""
    tasks, entries = cas_world()
    entries = [replace(e, outcome="applied") if e.pid == 11 and e.task_id == "c1"
               and e.detail == "terminal" else e for e in entries]
    failed = failing(check_cas(tasks, entries, task_ids=["c1", "c2"], writers=3))
    assert (3, 3, 1) == (failed["terminal_applied"], failed["terminal_conflicts"],
                         failed["terminal_not_one_winner"])


def test_an_unexpected_cas_answer_is_caught() -> None:
    """An answer other than applied or a conflict (e.g. ``StoreUnavailable``) MUST fail."""
    tasks, entries = cas_world()
    entries = [replace(e, outcome="StoreUnavailable") if e.pid == 12 and e.task_id == "c2"
               and e.detail == "revision" else e for e in entries]
    failed = failing(check_cas(tasks, entries, task_ids=["c1", "c2"], writers=3))
    assert {"revision_conflicts": 3, "revision_unexpected": 1} == failed


def test_a_cas_history_or_result_of_a_loser_is_caught() -> None:
    """A history that holds a loser's event, or a loser's result, MUST fail."""
    tasks, entries = cas_world()
    tasks["c1"] = replace(tasks["c1"], result={"writer": 2})
    assert {"overwritten": 1} == failing(check_cas(tasks, entries, task_ids=["c1", "c2"],
                                                   writers=3))
    tasks, entries = cas_world()
    events = (tasks["c2"].events[0],
              HistoryEvent("completed", "cas:1:terminal:c2", "completed"))
    tasks["c2"] = replace(tasks["c2"], events=events)
    assert {"terminal_history": 1} == failing(check_cas(tasks, entries,
                                                        task_ids=["c1", "c2"], writers=3))


def test_task_facts_read_what_the_store_kept() -> None:
    """``TaskFacts.of`` MUST carry the status, result, deliveries, last claim and history
    exactly as the store returns them."""

    async def scenario() -> TaskFacts:
        store = MemoryStore()
        await store.create(NewTask(id="t", tenant="default", owner=None,
                                   work=Work(name="x")))
        claim = await store.claim("t", "w", 30)
        await store.transition("t", 0, Completed(event_id="e", result={"n": 1}), claim.lease)
        snapshot = await store.get("t", tenant=None)
        return TaskFacts.of(snapshot, await store.history("t", tenant=None),
                            await store.now())

    facts = asyncio.run(scenario())
    assert ("completed", {"n": 1}, 1, 1, False, False) == (
        facts.status, facts.result, facts.deliveries, facts.generation, facts.lease_live,
        facts.recovered)
    assert [HistoryEvent("completed", "e", "completed")] == facts.terminal_events
