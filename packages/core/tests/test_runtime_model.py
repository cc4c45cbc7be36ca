"""The runtime against a pure model (Hypothesis): an ``App`` on the memory store, driven by
random programs of client calls, worker steps, crashes and clock moves."""

from __future__ import annotations

from typing import Any

import pytest
from tasks_contract_tests.runtime_machine import run_runtime_model_check
from tasks_core import TaskStore
from tasks_store_memory import MemoryStore


async def _memory(**options: Any) -> TaskStore:
    return MemoryStore(**options)


@pytest.mark.parametrize(("visibility", "examples"), [("watchers", 40), ("tenant", 20)])
def test_the_app_agrees_with_the_model(visibility: Any, examples: int) -> None:
    """Driven by random programs of ``submit`` (keys, global keys, watchers, retry
    policies, delivery limits, TTLs), ``cancel``, ``respond``, ``release``, ``reap``,
    claims, worker writes through ``LeaseCell``, renewals, releases, crashes and clock
    moves, the App MUST show after every step exactly what the model predicts: each task's
    status, revision, result, error, retries, deliveries, lease, input, instants and
    history, and to each principal exactly the tasks it may see (an invisible task reads
    exactly like a missing one)."""
    run_runtime_model_check(_memory, max_examples=examples, steps=30, visibility=visibility)
