"""``Grouped``: calls that arrive while a group runs are run together next, each caller
gets its own outcome, and no cancellation loses a caller's outcome or the lead."""

from __future__ import annotations

import asyncio

import pytest
from tasks_store_sql._grouped import Grouped

pytestmark = pytest.mark.anyio


class Runs:
    """A ``run`` whose groups each wait for :meth:`finish`, recording what they got."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.groups: list[list[str]] = []
        self.finished: list[list[str]] = []
        self.started = asyncio.Event()
        self._gates: list[asyncio.Event] = []
        self._fail = fail or set()

    async def __call__(self, items: list[str]) -> list[str]:
        gate = asyncio.Event()
        self._gates.append(gate)
        self.groups.append(items)
        self.started.set()
        await gate.wait()
        if self._fail & set(items):
            raise LookupError("the group failed")
        self.finished.append(items)
        return [item.upper() for item in items]

    async def finish(self) -> None:
        """Let the oldest group waiting finish, once one has started."""
        while not self._gates:
            self.started.clear()
            await self.started.wait()
        self._gates.pop(0).set()


async def _started(runs: Runs, groups: int) -> None:
    while len(runs.groups) < groups:
        runs.started.clear()
        await runs.started.wait()


async def _waiting(grouped: Grouped[str, str], calls: int) -> None:
    """Let the new callers run up to their ``await`` (one turn of the event loop, which
    runs every task made ready before it) and check that ``calls`` of them wait."""
    await asyncio.sleep(0)
    assert len(grouped._waiting) == calls


async def _behind_a_first(
    runs: Runs, grouped: Grouped[str, str], items: str
) -> tuple[asyncio.Task[str], list[asyncio.Task[str]]]:
    """A first call (``"a"``), its group running; then a call of each of ``items``,
    waiting behind it."""
    first = asyncio.ensure_future(grouped("a"))
    await _started(runs, 1)
    later = [asyncio.ensure_future(grouped(item)) for item in items]
    await _waiting(grouped, len(items))
    return first, later


async def test_calls_that_arrive_while_a_group_runs_run_together_next() -> None:
    runs = Runs()
    grouped = Grouped(runs, most=10)
    first, later = await _behind_a_first(runs, grouped, "bcd")
    await runs.finish()
    await runs.finish()

    assert await first == "A"
    assert [await call for call in later] == ["B", "C", "D"]
    assert runs.groups == [["a"], ["b", "c", "d"]]


async def test_a_group_holds_at_most_most_calls_oldest_first() -> None:
    runs = Runs()
    grouped = Grouped(runs, most=2)
    calls = [asyncio.ensure_future(grouped(item)) for item in "abcde"]
    for _ in range(3):
        await runs.finish()

    assert [await call for call in calls] == ["A", "B", "C", "D", "E"]
    assert runs.groups == [["a"], ["b", "c"], ["d", "e"]]


async def test_a_failed_group_fails_each_of_its_callers_and_the_next_group_runs() -> None:
    runs = Runs(fail={"b"})
    grouped = Grouped(runs, most=10)
    first, failing = await _behind_a_first(runs, grouped, "bc")
    await runs.finish()
    await runs.finish()
    assert await first == "A"
    for call in failing:
        with pytest.raises(LookupError):
            await call

    after = asyncio.ensure_future(grouped("d"))
    await runs.finish()
    assert await after == "D"


async def test_a_caller_cancelled_before_its_group_starts_is_never_run() -> None:
    runs = Runs()
    grouped = Grouped(runs, most=10)
    first, (dropped, kept) = await _behind_a_first(runs, grouped, "bc")
    dropped.cancel()
    await runs.finish()
    await runs.finish()

    assert (await first, await kept) == ("A", "C")
    assert dropped.cancelled()
    assert runs.groups == [["a"], ["c"]]


async def test_a_cancelled_leader_leaves_a_group_of_others_to_finish() -> None:
    runs = Runs()
    grouped = Grouped(runs, most=10)
    leader, others = await _behind_a_first(runs, grouped, "bc")
    await runs.finish()  # "a" done: its caller leads the group of "b" and "c" ...
    await _started(runs, 2)
    leader.cancel()  # ... and leaves while it runs
    await asyncio.sleep(0)
    await runs.finish()

    assert [await call for call in others] == ["B", "C"]
    with pytest.raises(asyncio.CancelledError):
        await leader
    assert runs.finished == [["a"], ["b", "c"]]


async def test_a_cancelled_leader_alone_stops_its_run_and_hands_the_lead_on() -> None:
    runs = Runs()
    grouped = Grouped(runs, most=10)
    leader, (waiter,) = await _behind_a_first(runs, grouped, "b")
    leader.cancel()  # its run had nobody else in it: it stops with its caller
    await _started(runs, 2)
    await runs.finish()
    await runs.finish()

    assert await waiter == "B"
    with pytest.raises(asyncio.CancelledError):
        await leader
    assert runs.groups == [["a"], ["b"]]
    assert runs.finished == [["b"]]


async def test_a_caller_cancelled_as_it_is_handed_the_lead_passes_it_on() -> None:
    runs = Runs()
    grouped = Grouped(runs, most=10)
    first, (heir, next_heir) = await _behind_a_first(runs, grouped, "bc")
    first.cancel()  # "b" is handed the lead ...
    await asyncio.sleep(0)
    heir.cancel()  # ... and cancelled before it takes it
    await _started(runs, 2)
    await runs.finish()
    await runs.finish()

    assert await next_heir == "C"
    assert heir.cancelled()
    assert runs.groups == [["a"], ["c"]]
