"""The index ``claim_next`` reads (``OpenTasks``) and when a held task turns claimable; what
a ``Row`` keeps beside its document for ``max_active_tasks_per_scope``."""

from __future__ import annotations

import bisect
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from tasks_core import rules
from tasks_core.authority import Owner
from tasks_core.models import NewTask, Snapshot, TaskStatus, Work
from tasks_store_memory._rows import _DEAD_FRONT, OpenTasks, Row, _Ready, claimable_at

T0 = datetime(2030, 1, 1, tzinfo=UTC)
ALICE = Owner("alice")


def snapshot(task_id: str, *, queue: str = "default", at: float = 0.0) -> Snapshot:
    new = NewTask(id=task_id, tenant=ALICE.tenant, owner=ALICE, queue=queue,
                  work=Work(name="noop"))
    return rules.new_snapshot(new, T0 + timedelta(seconds=at))


def ready_ids(index: OpenTasks, queues: list[str]) -> list[str]:
    return [order[-1] for order in index.in_order(queues)]


def test_ready_tasks_come_oldest_first_across_queues() -> None:
    index = OpenTasks()
    for task_id, queue, at in [("c", "a", 3), ("a", "b", 1), ("b", "a", 2), ("d", "c", 0)]:
        index.add(snapshot(task_id, queue=queue, at=at))
    assert ["a", "b", "c"] == ready_ids(index, ["a", "b"])


def test_a_queue_closed_meanwhile_is_left_out() -> None:
    index = OpenTasks()
    for n, queue in enumerate(["x", "y", "x", "y", "x"]):
        index.add(snapshot(f"t{n}", queue=queue, at=n))
    closed: set[str] = set()
    seen = []
    for *_, task_id in index.in_order(["x", "y"], closed):
        seen.append(task_id)
        if task_id == "t0":
            closed.add("x")
    assert ["t0", "t1", "t3"] == seen


def test_a_held_task_is_ready_again_at_its_instant_not_before() -> None:
    index = OpenTasks()
    task = snapshot("t")
    index.hold(task, T0 + timedelta(seconds=10))
    index.wake(T0 + timedelta(seconds=9))
    assert [] == ready_ids(index, ["default"])
    assert {"t"} == set(index.held("default"))
    index.wake(T0 + timedelta(seconds=10))
    assert ["t"] == ready_ids(index, ["default"])
    assert not index.held("default")


def test_a_renewed_hold_is_not_woken_by_its_older_instant() -> None:
    index = OpenTasks()
    task = snapshot("t")
    index.hold(task, T0 + timedelta(seconds=10))
    index.hold(task, T0 + timedelta(seconds=20))
    index.wake(T0 + timedelta(seconds=15))
    assert [] == ready_ids(index, ["default"])
    index.wake(T0 + timedelta(seconds=20))
    assert ["t"] == ready_ids(index, ["default"])


def test_a_hold_without_an_instant_waits_for_a_write_and_discard_forgets() -> None:
    index = OpenTasks()
    task = snapshot("t")
    index.hold(task, None)
    index.wake(T0 + timedelta(days=365))
    assert [] == ready_ids(index, ["default"])
    index.discard("t")
    assert [] == list(index)
    assert not index.held("default")


def test_stale_instants_do_not_pile_up() -> None:
    index = OpenTasks()
    task = snapshot("t")
    for n in range(10_000):
        index.hold(task, T0 + timedelta(seconds=n))
    assert len(index._due) <= 2 * len(list(index)) + 1001


def test_claimable_at_is_the_later_of_lease_expiry_and_retry() -> None:
    task = snapshot("t")
    now = T0 + timedelta(seconds=1)
    leased, _, _, _ = rules.start_claim(task, "w", 30, now)
    assert leased.claim is not None
    assert leased.claim.expires_at == claimable_at(leased, now)
    retry_at = leased.claim.expires_at + timedelta(seconds=5)
    assert retry_at == claimable_at(leased.model_copy(update={"retry_at": retry_at}), now)
    waiting = task.model_copy(update={"status": TaskStatus.WAITING_INPUT})
    assert claimable_at(waiting, now) is None
    done = task.model_copy(update={"status": TaskStatus.COMPLETED})
    assert claimable_at(done, now) is None


def test_set_aside_holds_a_ready_task_until_its_next_write() -> None:
    index = OpenTasks()
    index.add(snapshot("t"))
    index.set_aside("t")
    assert [] == ready_ids(index, ["default"])
    assert {"t"} == set(index.held("default"))
    assert ["t"] == list(index)
    index.wake(T0 + timedelta(days=365))
    assert [] == ready_ids(index, ["default"])
    index.add(snapshot("t"))
    assert ["t"] == ready_ids(index, ["default"])


def test_holding_a_task_again_at_the_same_instant_changes_nothing() -> None:
    index = OpenTasks()
    task = snapshot("t")
    index.hold(task, T0 + timedelta(seconds=10))
    index.hold(task, T0 + timedelta(seconds=10))
    assert [(T0 + timedelta(seconds=10), "t")] == index._due


def test_the_heap_is_rebuilt_past_twice_the_open_tasks_plus_1000() -> None:
    """Two open tasks: 1004 heap entries are kept, the 1005th rebuilds the heap with the
    current instant of each held task only."""
    index = OpenTasks()
    index.hold(snapshot("w"), None)  # held, no instant: never in the heap
    task = snapshot("t")
    for n in range(1004):
        index.hold(task, T0 + timedelta(seconds=n))
    assert 1004 == len(index._due)
    index.hold(task, T0 + timedelta(days=1))
    assert [(T0 + timedelta(days=1), "t")] == index._due


def test_claimable_at_is_now_when_nothing_but_a_look_can_tell() -> None:
    """No retry and no live lease (never claimed, or its lease expired): ``now``."""
    task = snapshot("t")
    now = T0 + timedelta(seconds=100)
    assert now == claimable_at(task, now)
    leased, _, _, _ = rules.start_claim(task, "w", 30, T0 + timedelta(seconds=1))
    assert now == claimable_at(leased, now)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 60)), max_size=300))
def test_ready_entries_match_a_sorted_list_whatever_is_added_and_removed(
    steps: list[tuple[bool, int]],
) -> None:
    ready, model = _Ready(), []  # the model: a plain sorted list
    for add, value in steps:
        order = (0, T0, f"t{value:03}")
        if add and order not in model:
            ready.add(order)
            bisect.insort(model, order)
        elif not add and model:
            taken = model[value % len(model)]  # the head, the tail or between
            ready.remove(taken)
            model.remove(taken)
        assert model == ready.entries[ready.start:]
        assert len(model) == len(ready)


def test_a_task_is_found_among_the_live_entries_below_a_dead_front_of_later_ones() -> None:
    """Tasks that come before the dead front in claim order (a higher priority, an
    earlier instant, submitted after the front was taken) are live: removing one removes
    it, not the live head, however many dead entries lie before them in the list."""
    ready, orders = _ready_of(4)
    for order in orders:  # the front taken: four dead entries
        ready.remove(order)
    first, second = (-1, T0, "a"), (-1, T0, "b")  # before every dead entry
    ready.add(first)
    ready.add(second)
    ready.remove(second)
    assert [first] == ready.entries[ready.start:]


def test_taking_the_head_again_and_again_keeps_the_list_bounded() -> None:
    ready = _Ready()
    for n in range(5000):
        ready.add((0, T0, f"t{n:05}"))
        if n >= 100:  # a backlog of 100: every new task, one taken from the front
            ready.remove(ready.entries[ready.start])
    assert len(ready) == 100
    assert len(ready.entries) <= 2 * max(len(ready), _DEAD_FRONT)


def _ready_of(count: int) -> tuple[_Ready, list[tuple[int, datetime, str]]]:
    """A ready list of ``count`` tasks, and their orders."""
    ready, orders = _Ready(), [(0, T0, f"t{n:05}") for n in range(count)]
    for order in orders:
        ready.add(order)
    return ready, orders


def test_taking_the_head_moves_nothing_until_1024_dead_entries_are_cut() -> None:
    """Removing the first ready task only moves the live part's start; at 1,024 dead
    entries, half the list or more, the dead front is cut off in one go."""
    ready, orders = _ready_of(2048)
    for order in orders[:1023]:
        ready.remove(order)
    assert (2048, 1023) == (len(ready.entries), ready.start)
    ready.remove(orders[1023])
    assert (1024, 0) == (len(ready.entries), ready.start)
    assert orders[1024:] == ready.entries


def test_a_dead_front_less_than_half_the_list_is_kept() -> None:
    """Past 1,024 dead entries the front is cut only once it is half the list: of 3,000
    entries, 1,499 taken leave the list whole; the 1,500th cuts it."""
    ready, orders = _ready_of(3000)
    for order in orders[:1499]:
        ready.remove(order)
    assert (3000, 1499) == (len(ready.entries), ready.start)
    ready.remove(orders[1499])
    assert (1500, 0) == (len(ready.entries), ready.start)


STORED = [TaskStatus.PENDING, TaskStatus.WAITING_INPUT, TaskStatus.COMPLETED,
          TaskStatus.FAILED, TaskStatus.CANCELLED]


@given(st.sampled_from(STORED), st.sampled_from(STORED), st.none() | st.integers(-2, 2),
       st.none() | st.integers(-2, 2))
def test_a_row_counts_as_active_as_the_rule_reads_its_last_written_snapshot(
    created: TaskStatus, written: TaskStatus, created_expiry: int | None,
    expiry: int | None,
) -> None:
    """``Row.counts_as_active`` is ``rules.counts_as_active`` of the snapshot last written
    (its tenant's only), damaged record or not."""
    def at(expiry: int | None) -> datetime | None:
        return None if expiry is None else T0 + timedelta(seconds=expiry)

    first = snapshot("t").model_copy(update={"status": created,
                                             "expires_at": at(created_expiry)})
    last = first.model_copy(update={"status": written, "expires_at": at(expiry)})
    row = Row.of(first)
    row.write(last)
    row.damaged = True
    assert rules.counts_as_active(last, T0) == row.counts_as_active(ALICE.tenant, T0)
    assert not row.counts_as_active("another", T0)
