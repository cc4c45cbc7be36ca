"""The edges of ``tasks_core.storekit`` found by mutation testing (issue 33): queue
limits at their limits and as plain numbers, the room a call has, ``create_many``'s
checks, and what a claim past its delivery limit reports."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from tasks_core import (
    CapacityExceeded,
    Completed,
    InvalidInput,
    NewTask,
    Owner,
    Snapshot,
    StoreLimits,
    TaskExists,
    TaskStatus,
    Unavailable,
    Work,
    rules,
    storekit,
)


def _task(task_id: str, queue: str, at: datetime) -> Snapshot:
    new = NewTask(id=task_id, tenant="default", owner=Owner("alice"), queue=queue,
                  work=Work(name="job"))
    return rules.new_snapshot(new, at)


def _limited(queues: list[str], limits: dict[str, storekit.QueueLimits]
             ) -> storekit.ClaimRequest:
    return storekit.check_claim_next("w1", 30, queues, 10, (), None, limits)


def test_withdraw_gives_back_exactly_one_claim_of_room(now: datetime) -> None:
    """With ``max_running=3``, two claims leave room 1; withdrawing one leaves room 2."""
    scan = storekit.ClaimScan(_limited(["m"], {"m": storekit.QueueLimits(max_running=3)}), now)
    first = scan.offer(_task("m1", "m", now))
    assert first is not None
    assert scan.offer(_task("m2", "m", now)) is not None
    assert 1 == scan.room("m")
    scan.withdraw(first)
    assert 2 == scan.room("m")


class _Count(int):
    """An integral number that is not exactly an ``int``."""


def test_queue_limits_take_1_to_1000000_as_plain_numbers() -> None:
    """Counts of 1_000_000 (the most) and an ``int`` subclass are taken and kept as plain
    ``int``; the window as a ``float``; a window of 0.001 s (the least) is taken."""
    most = storekit.QueueLimits(max_running=1_000_000, rate=(1_000_000, 0.001))
    assert (1_000_000, (1_000_000, 0.001)) == (most.max_running, most.rate)
    plain = storekit.QueueLimits(max_running=_Count(3), rate=(_Count(5), 60))
    assert plain.rate is not None
    assert [int, int, float] == [type(plain.max_running), type(plain.rate[0]),
                                 type(plain.rate[1])]
    assert (3, (5, 60.0)) == (plain.max_running, plain.rate)


@pytest.mark.parametrize(("limits", "message"), [
    ({"max_running": 0}, "max_running must be an integer in 1..1000000, not 0"),
    ({"rate": (0, 60)}, "the claims of rate must be an integer in 1..1000000, not 0"),
    ({"rate": (1_000_001, 60)},
     "the claims of rate must be an integer in 1..1000000, not 1000001"),
    ({"rate": (5, 0)}, "the window of rate must be in [0.001, 31622400] seconds, not 0"),
])
def test_a_refused_queue_limit_names_itself_and_its_bounds(
    limits: dict[str, object], message: str
) -> None:
    """A refused limit MUST say which one (``max_running``, the claims or the window of
    ``rate``), its bounds and the value given: the worker prints it as its refusal."""
    with pytest.raises(InvalidInput) as refused:
        storekit.QueueLimits(**limits)  # type: ignore[arg-type]
    assert message == str(refused.value)


def test_a_refused_claim_start_names_itself() -> None:
    """``claim_next``'s ``start`` below 0 MUST be refused naming ``start``."""
    with pytest.raises(InvalidInput) as refused:
        storekit.check_claim_next("w1", 30.0, ["q"], 1, (), start=-1)
    assert "start (or None) must be an integer from 0, not -1" == str(refused.value)


@pytest.mark.parametrize("bad", [
    {"max_running": True}, {"max_running": 2.0}, {"max_running": "2"},
    {"rate": (True, 60)}, {"rate": (1, 0.0009)},
])
def test_queue_limits_refuse_what_is_not_a_count_or_a_window(bad: dict[str, object]) -> None:
    """A bool, a float or a string is no count; a window below 0.001 s is refused."""
    with pytest.raises(InvalidInput):
        storekit.QueueLimits(**bad)  # type: ignore[arg-type]


def test_window_start_is_now_less_the_rates_window(now: datetime) -> None:
    """The claims of the window ending at ``now`` are those after ``now - seconds``; a
    queue without a rate has no window."""
    assert now - timedelta(seconds=60) == storekit.QueueLimits(rate=(5, 60)).window_start(now)
    assert storekit.QueueLimits(max_running=2).window_start(now) is None


def _new(task_id: str, tenant: str = "default") -> NewTask:
    return NewTask(id=task_id, tenant=tenant, owner=None, work=Work(name="job"))


def test_check_create_many_takes_1000_tasks_and_only_a_sequence() -> None:
    """A list of 1000 distinct tasks (the most) is taken, in order; a set is no
    sequence."""
    batch = [_new(f"t{n}") for n in range(1000)]
    assert batch == storekit.check_create_many(tuple(batch))
    with pytest.raises(InvalidInput):
        storekit.check_create_many({_new("t1")})


def test_a_taken_id_is_named_as_a_reader_sees_it(now: datetime) -> None:
    """``TaskExists`` carries the taken task as ``get`` reads it at ``now`` (a claimed
    task reads ``running``)."""
    stored = rules.new_snapshot(_new("t1"), now)
    running, _, _, _ = rules.start_claim(stored, "w1", 30, now)
    with pytest.raises(TaskExists) as caught:
        storekit.check_batch_room([_new("t1")], taken={"t1": running}, stored=1,
                                  active=lambda tenant: 1, limits=StoreLimits(), now=now)
    assert TaskStatus.RUNNING == caught.value.current.status


def test_batch_room_counts_a_tenant_only_when_the_store_alone_shows_no_room(
    now: datetime,
) -> None:
    """With ``max_active_tasks_per_scope=2``: 1 stored task and a batch of 1 fit without
    reading the tenant's count; 2 stored, both active, and a batch of 1 are refused."""
    limits = StoreLimits(max_active_tasks_per_scope=2)

    def unread(tenant: str) -> int:
        raise AssertionError("the tenant's count was read")

    storekit.check_batch_room([_new("t1")], taken={}, stored=1, active=unread,
                              limits=limits, now=now)
    with pytest.raises(CapacityExceeded):
        storekit.check_batch_room([_new("t1")], taken={}, stored=2, active=lambda t: 2,
                                  limits=limits, now=now)


@pytest.fixture
def delivery_limits(monkeypatch: pytest.MonkeyPatch) -> list[Snapshot]:
    """The tasks the active telemetry is handed as failed past their delivery limit."""
    counted: list[Snapshot] = []

    class Recorder:
        def delivery_limit(self, snapshot: Snapshot) -> None:
            counted.append(snapshot)

    monkeypatch.setattr("tasks_core.telemetry.active", Recorder())
    return counted


def _spent(now: datetime) -> Snapshot:
    """A pending task that has had every delivery it may have."""
    task = _task("t", "q", now)
    return task.model_copy(update={"deliveries": task.work.max_deliveries})


def test_a_failure_past_the_delivery_limit_is_counted_by_telemetry(
    now: datetime, delivery_limits: list[Snapshot]
) -> None:
    """``claim_result`` of a task failed past its delivery limit hands the failed task to
    the active telemetry (``delivery_limit``) before it refuses."""
    started = storekit.claim_one(_spent(now), "w1", 30, now)
    with pytest.raises(Unavailable):
        storekit.claim_result(started)
    assert [started.snapshot] == delivery_limits


def test_a_rate_limited_queue_left_out_of_recent_made_no_claims(now: datetime) -> None:
    """A store passes ``recent`` only for the queues it counted: a queue missing from it
    has its whole rate as room."""
    limits = {"m": storekit.QueueLimits(rate=(4, 60))}
    scan = storekit.ClaimScan(_limited(["m"], limits), now, running={}, recent={})
    assert 4 == scan.room("m")


def test_an_ended_claim_is_held_no_more(now: datetime) -> None:
    """A claim held ahead (``start``) and then ended by its holder (completed) is no
    longer ``held``."""
    task = _task("t", "q", now)
    held, token, lease, _ = rules.start_claim(task, "w1", 30, now, held=True)
    assert held.claim is not None
    assert lease is not None
    assert held.claim.held
    decision = rules.decide_transition(held, token, None, held.revision,
                                       Completed(event_id="done"), lease, now)
    assert decision.write is not None
    ended = decision.write[0].claim
    assert ended is not None
    assert (True, False) == (ended.ended, ended.held)


def test_a_scan_offers_nothing_past_its_limit(now: datetime) -> None:
    """With ``limit=1`` the second candidate is not claimed."""
    scan = storekit.ClaimScan(storekit.check_claim_next("w1", 30, ["q"], 1, ()), now)
    assert scan.offer(_task("t1", "q", now)) is not None
    assert scan.offer(_task("t2", "q", now)) is None
    assert ["t1"] == [claim.snapshot.id for claim in scan.claims]


def test_a_scans_failures_are_counted_by_telemetry_when_reported(
    now: datetime, delivery_limits: list[Snapshot]
) -> None:
    """``ClaimScan.report`` hands each task it failed past its delivery limit to the
    active telemetry."""
    scan = storekit.ClaimScan(storekit.check_claim_next("w1", 30, ["q"], 1, ()), now)
    failed = scan.offer(_spent(now))
    assert failed is not None
    scan.report()
    assert [failed.snapshot] == delivery_limits
