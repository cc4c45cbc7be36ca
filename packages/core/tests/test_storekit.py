"""The claim decision and transition glue of ``tasks_core.storekit`` (no store involved):
what a scan serves, in which order, and what it hands a store to write."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from tasks_core import (
    Access,
    Cancelled,
    Completed,
    InvalidInput,
    NewTask,
    Owner,
    RevisionConflict,
    Snapshot,
    System,
    TaskNotFound,
    TaskStatus,
    Unavailable,
    WatcherAdded,
    Work,
    rules,
    storekit,
)
from tasks_core.events import EventRecord

ALICE = Owner("alice")


def _task(task_id: str, queue: str, at: datetime, **work: object) -> Snapshot:
    new = NewTask(id=task_id, tenant="default", owner=ALICE, queue=queue,
                  work=Work(name="job", **work))  # type: ignore[arg-type]
    return rules.new_snapshot(new, at)


def _request(queues: list[str], limit: int = 10, exclusive: tuple[str, ...] = ()
             ) -> storekit.ClaimRequest:
    return storekit.check_claim_next("w1", 30, queues, limit, exclusive)


def test_check_claim_next_refuses_bad_arguments_before_any_read() -> None:
    """Every argument of claim_next is checked once, by the kit."""
    with pytest.raises(InvalidInput):
        storekit.check_claim_next("w1", 30, "emails", 1, ())
    with pytest.raises(InvalidInput):
        storekit.check_claim_next("w1", 30, [], 1, ())
    with pytest.raises(InvalidInput):
        storekit.check_claim_next("w1", 30, ["q"], rules.MAX_BATCH + 1, ())
    with pytest.raises(InvalidInput):
        storekit.check_claim_next("", 30, ["q"], 1, ())
    with pytest.raises(InvalidInput):
        storekit.check_claim_next("w1", float("inf"), ["q"], 1, ())
    with pytest.raises(InvalidInput):
        storekit.check_claim(7, "w1", 30)  # type: ignore[arg-type]


def test_request_keeps_only_the_exclusive_queues_asked_for() -> None:
    request = _request(["a", "b"], exclusive=("b", "c"))
    assert request.queues == {"a", "b"}
    assert request.limited == {"b"}


def test_claim_order_is_oldest_first_then_id(now: datetime) -> None:
    later = _task("a", "q", now + timedelta(milliseconds=1))
    older_b = _task("b", "q", now)
    older_c = _task("c", "q", now)
    ordered = sorted([later, older_c, older_b], key=storekit.claim_order)
    assert [t.id for t in ordered] == ["b", "c", "a"]
    assert storekit.claim_order(later)[-1] == "a"


def test_scan_serves_up_to_the_limit_in_the_order_offered(now: datetime) -> None:
    scan = storekit.ClaimScan(_request(["q"], limit=2), now)
    decided = [scan.offer(_task(name, "q", now)) for name in ("x", "y", "z")]
    assert [d is not None for d in decided] == [True, True, False]
    assert [c.snapshot.id for c in scan.claims] == ["x", "y"]
    assert scan.done
    assert scan.remaining == 0


def test_scan_skips_what_is_not_a_candidate(now: datetime) -> None:
    """A finished task, a leased one, another queue's: skipped, nothing to write."""
    scan = storekit.ClaimScan(_request(["q"]), now)
    finished = rules.apply_event(_task("done", "q", now), Cancelled(event_id="c"), now)
    assert finished is not None
    leased = rules.start_claim(_task("leased", "q", now), "w0", 30, now)[0]
    assert scan.offer(finished[0]) is None
    assert scan.offer(leased) is None
    assert scan.offer(_task("elsewhere", "other", now)) is None
    assert scan.claims == []
    assert scan.failures == []


def test_an_exclusive_queue_yields_one_claim_and_a_busy_one_none(now: datetime) -> None:
    scan = storekit.ClaimScan(_request(["ex", "busy", "shared"], exclusive=("ex", "busy")),
                              now, busy=["busy"])
    assert scan.open_queues() == ["ex", "shared"]
    assert scan.fetches() == [(["shared"], 10), (["ex"], 1)]
    assert scan.offer(_task("b1", "busy", now)) is None
    assert scan.offer(_task("e1", "ex", now)) is not None
    assert scan.offer(_task("e2", "ex", now)) is None
    assert scan.offer(_task("s1", "shared", now)) is not None
    assert scan.offer(_task("s2", "shared", now)) is not None
    assert [c.snapshot.id for c in scan.claims] == ["e1", "s1", "s2"]
    assert scan.open_queues() == ["shared"]


def test_a_busy_exclusive_queue_never_blocks_the_calls_other_queues(now: datetime) -> None:
    scan = storekit.ClaimScan(_request(["ex", "q"], exclusive=("ex",)), now, busy=["ex"])
    assert not scan.done
    assert scan.offer(_task("t", "q", now)) is not None


def test_past_its_delivery_limit_a_task_is_failed_and_not_counted(now: datetime) -> None:
    scan = storekit.ClaimScan(_request(["q"], limit=1), now)
    spent = _task("spent", "q", now, max_deliveries=1).model_copy(update={"deliveries": 1})
    failed = scan.offer(spent)
    assert failed is not None
    assert failed.claim is None
    assert failed.failure is not None
    assert failed.token is None
    assert failed.snapshot.terminal
    assert scan.remaining == 1
    assert not scan.done
    assert scan.offer(_task("next", "q", now)) is not None
    assert [s.snapshot.id for s in scan.failures] == ["spent"]


def test_withdraw_forgets_a_lost_write_and_reopens_its_exclusive_queue(now: datetime) -> None:
    scan = storekit.ClaimScan(_request(["ex"], limit=2, exclusive=("ex",)), now)
    lost = scan.offer(_task("e1", "ex", now))
    assert lost is not None
    assert scan.open_queues() == []
    scan.withdraw(lost)
    assert scan.claims == []
    assert scan.open_queues() == ["ex"]
    assert scan.offer(_task("e2", "ex", now)) is not None


def test_close_marks_an_exclusive_queue_found_busy_meanwhile(now: datetime) -> None:
    scan = storekit.ClaimScan(_request(["ex", "q"], exclusive=("ex",)), now)
    scan.close("ex")
    scan.close("q")  # not exclusive: stays open
    assert scan.open_queues() == ["q"]


def test_holds_queue_is_a_live_lease_whatever_the_status(now: datetime) -> None:
    task = _task("t", "q", now)
    leased = rules.start_claim(task, "w1", 30, now)[0]
    cancelled = rules.apply_event(leased, Cancelled(event_id="c"), now)
    assert cancelled is not None
    assert not storekit.holds_queue(task, now)
    assert storekit.holds_queue(leased, now)
    assert storekit.holds_queue(cancelled[0], now)
    assert not storekit.holds_queue(leased, now + timedelta(seconds=31))


def test_claim_one_refuses_an_unclaimable_task_and_reports_a_failure(now: datetime) -> None:
    task = _task("t", "q", now)
    leased = rules.start_claim(task, "w0", 30, now)[0]
    with pytest.raises(Unavailable):
        storekit.claim_one(leased, "w1", 30, now)
    started = storekit.claim_one(task, "w1", 30, now)
    assert storekit.claim_result(started) is started.claim
    spent = task.model_copy(update={"deliveries": task.work.max_deliveries})
    with pytest.raises(Unavailable, match="deliveries"):
        storekit.claim_result(storekit.claim_one(spent, "w1", 30, now))


class _Loaded:
    def __init__(self, snapshot: Snapshot, token: str | None = None) -> None:
        self.snapshot = snapshot
        self.token = token
        self.history: dict[str, EventRecord] = {}

    def earlier(self, event_id: str) -> Callable[[], EventRecord] | None:
        record = self.history.get(event_id)
        return None if record is None else lambda: record

    def update(self, snapshot: Snapshot, record: EventRecord) -> None:
        self.snapshot = snapshot
        self.history[record.event_id] = record


def test_a_plan_decides_items_in_order_each_seeing_the_earlier(now: datetime) -> None:
    system = Access(principal=System(), visibility="watchers")
    task = _Loaded(_task("t", "q", now))
    items = [
        ("t", 0, WatcherAdded(event_id="w", principal=Owner("bob")), system),
        ("t", 0, Cancelled(event_id="c"), system),   # stale revision: refused in place
        ("t", 1, Cancelled(event_id="c"), system),
        ("t", 2, Cancelled(event_id="c"), system),   # replayed
        ("gone", 0, Cancelled(event_id="x"), system),
    ]
    plan = storekit.plan_transitions(items, {"t": task}, now)
    outcomes = [getattr(r, "outcome", type(r)) for r in plan.results]
    assert outcomes == ["applied", RevisionConflict, "applied", "duplicate", TaskNotFound]
    assert [event.event_id for _, event in plan.events] == ["w", "c"]
    assert plan.watchers == [("t", Owner("bob"))]
    assert plan.cancelled == {"t"}
    assert plan.wake == {"q"}
    assert task.snapshot.revision == 2


def test_transition_result_raises_the_refusal(now: datetime) -> None:
    plan = storekit.plan_transitions(
        [("t", 5, Cancelled(event_id="e"), Access(principal=System(), visibility="watchers"))],
        {"t": _Loaded(_task("t", "q", now))}, now)
    with pytest.raises(RevisionConflict) as refused:
        storekit.transition_result(plan)
    assert refused.value is plan.results[0]


def test_claims_past_start_are_held_and_read_claimed(now: datetime) -> None:
    """``start=1``: the first claim starts, the later ones are held (failures not counted)."""
    request = storekit.check_claim_next("w1", 30, ["q"], 3, (), start=1)
    scan = storekit.ClaimScan(request, now)
    spent = _task("spent", "q", now, max_deliveries=1).model_copy(update={"deliveries": 1})
    for snapshot in (spent, _task("a", "q", now), _task("b", "q", now)):
        scan.offer(snapshot)
    assert [c.snapshot.status for c in scan.claims] == [TaskStatus.RUNNING, TaskStatus.CLAIMED]
    held = scan.claims[1]
    renewed, _, _ = rules.renew(held.snapshot, held.lease.token, held.lease, 30, now)
    assert renewed.claim is not None
    assert not renewed.claim.held
    assert rules.present(renewed, now).status == TaskStatus.RUNNING
    with pytest.raises(InvalidInput):
        storekit.check_claim_next("w1", 30, ["q"], 3, (), start=True)  # type: ignore[arg-type]


def test_a_plan_decides_with_the_given_checks(now: datetime) -> None:
    """``plan_transitions(lease_check=..., revision_check=...)`` MUST decide every item
    with those (the contract suite's broken stores replace them)."""
    task = _task("t", "q", now)
    claimed, _token, lease, _ = rules.start_claim(task, "w1", 30, now)
    assert lease is not None
    system = Access(principal=System(), visibility="watchers")
    calls: list[str] = []

    def lease_check(*args: object, **kwargs: object) -> None:
        calls.append("lease")

    def revision_check(snapshot: Snapshot, expected: int, at: datetime) -> None:
        calls.append(f"revision {expected} {at == now}")

    plan = storekit.plan_transitions(
        [("t", 7, Completed(event_id="done"), lease),
         ("t", 9, Cancelled(event_id="c"), system)],
        {"t": _Loaded(claimed, None)}, now,
        lease_check=lease_check, revision_check=revision_check)
    assert [getattr(r, "outcome", type(r)) for r in plan.results] == ["applied", "unchanged"]
    assert calls == ["lease", "revision 7 True", "revision 9 True"]


def test_claim_one_starts_with_the_given_start(now: datetime) -> None:
    """``claim_one(start=...)`` MUST decide the claim with the given function."""
    calls: list[str] = []

    def start(snapshot: Snapshot, worker_id: str, lease_for: float, at: datetime, *,
              held: bool = False) -> tuple:  # type: ignore[type-arg]
        calls.append(snapshot.id)
        return rules.start_claim(snapshot, worker_id, lease_for, at, held=held)

    storekit.claim_one(_task("t", "q", now), "w1", 30, now, start=start)
    assert ["t"] == calls


def test_start_is_none_or_at_least_zero() -> None:
    """``start=0`` holds every claim; a negative ``start`` is refused."""
    assert 0 == storekit.check_claim_next("w1", 30, ["q"], 3, (), start=0).start
    assert 1 == storekit.check_claim_next("w1", 30, ["q"], 3, (), start=1).start
    with pytest.raises(InvalidInput):
        storekit.check_claim_next("w1", 30, ["q"], 3, (), start=-1)


# -- fleet-wide queue limits -------------------------------------------------------------


def _limited(queues: list[str], limits: dict[str, storekit.QueueLimits], limit: int = 10
             ) -> storekit.ClaimRequest:
    return storekit.check_claim_next("w1", 30, queues, limit, (), None, limits)


def test_check_claim_next_keeps_the_limits_of_the_queues_asked_for() -> None:
    """Limits of queues not asked for are dropped; an exclusive queue is max_running=1,
    keeping a rate given for it."""
    rate = storekit.QueueLimits(rate=(5, 60))
    request = storekit.check_claim_next("w1", 30, ["a", "b"], 1, ("b",), None,
                                        {"b": rate, "c": rate})
    assert {"b": storekit.QueueLimits(max_running=1, rate=(5, 60.0))} == dict(request.limits)
    assert request.limited == {"b"}


def test_the_room_of_a_limited_queue_is_its_tightest_limit_less_the_counts(
    now: datetime,
) -> None:
    """``max_running`` less the live leases, and the rate's count less the window's claims:
    the smaller is what one call may claim of the queue; other queues are unaffected."""
    limits = {"m": storekit.QueueLimits(max_running=5, rate=(4, 60))}
    scan = storekit.ClaimScan(_limited(["m", "q"], limits), now, running={"m": 2},
                              recent={"m": 3})
    assert (1, 10) == (scan.room("m"), scan.room("q"))
    assert scan.fetches() == [(["q"], 10), (["m"], 1)]
    assert scan.offer(_task("m1", "m", now)) is not None
    assert scan.offer(_task("m2", "m", now)) is None
    assert scan.open_queues() == ["q"]
    assert 1 == scan.claimed("m")


def test_a_full_limited_queue_is_closed_from_the_start(now: datetime) -> None:
    """Counts at or past a limit leave no room (never a negative one)."""
    limits = {"m": storekit.QueueLimits(max_running=2)}
    scan = storekit.ClaimScan(_limited(["m"], limits), now, running={"m": 3})
    assert (0, [], True) == (scan.room("m"), scan.open_queues(), scan.done)


def test_withdraw_gives_a_limited_queue_its_room_back(now: datetime) -> None:
    limits = {"m": storekit.QueueLimits(max_running=1)}
    scan = storekit.ClaimScan(_limited(["m"], limits), now)
    lost = scan.offer(_task("m1", "m", now))
    assert lost is not None
    assert scan.room("m") == 0
    scan.withdraw(lost)
    assert scan.room("m") == 1


@pytest.mark.parametrize("bad", [
    {"max_running": 0}, {"max_running": 1_000_001}, {"rate": (1, 0)}, {"rate": (0, 1)},
    {"rate": (1, float("inf"))}, {}, {"rate": [1, 1]},
])
def test_queue_limits_refuse_what_no_queue_can_keep(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        storekit.QueueLimits(**bad)  # type: ignore[arg-type]

