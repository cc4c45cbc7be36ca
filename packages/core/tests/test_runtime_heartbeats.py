"""When runs' heartbeats start: one interval after each run was added, in that order,
never for a run discarded first (``tasks_core.runtime._heartbeats``)."""

from __future__ import annotations

import asyncio

import pytest
from _runtime_kit import TIMEOUT
from tasks_core.runtime._heartbeats import HeartbeatStarts

pytestmark = pytest.mark.anyio


class _Run:
    def __init__(self, name: str, started: list[tuple[str, float]], last: asyncio.Event | None
                 = None) -> None:
        self.name, self.started, self.last = name, started, last

    def start_heartbeat(self) -> None:
        self.started.append((self.name, asyncio.get_running_loop().time()))
        if self.last is not None:
            self.last.set()


async def test_heartbeats_start_one_interval_after_each_run_in_order_unless_discarded(
) -> None:
    """Each added run MUST start its heartbeat no earlier than one interval after it was
    added, in the order added; a run discarded before MUST never start one."""
    loop = asyncio.get_running_loop()
    starts = HeartbeatStarts(0.02)
    started: list[tuple[str, float]] = []
    last = asyncio.Event()
    added: dict[str, float] = {}
    runs = [_Run(name, started) for name in ("a", "b", "gone", "c")]
    runs.append(_Run("d", started, last))
    for run in runs:
        added[run.name] = loop.time()
        starts.add(run)
        await asyncio.sleep(0.005)  # spreads the due times: not a synchronization
    starts.discard(runs[2])
    await asyncio.wait_for(last.wait(), TIMEOUT)
    assert ["a", "b", "c", "d"] == [name for name, _ in started]
    assert all(at >= added[name] + 0.02 for name, at in started)
