"""A completion takes the snapshot its claim decoded (or wrote) when the locked row still
holds that exact text, and decodes the row whenever anything changed it since."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import Opener
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import Completed, ManualClock, Snapshot, TaskQuery, TaskStatus, rules
from tasks_store_sql import SQLStore, _codec
from tasks_store_sql._codec import Decoded

pytestmark = pytest.mark.anyio


async def test_a_completion_reuses_the_claimed_snapshot_only_for_the_same_text(
    any_opener: Opener,
    closing: Callable[[SQLStore], SQLStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The completion of a task claimed by this store MUST take the snapshot the claim
    decoded (PostgreSQL's one-statement claim) or wrote (the other dialects) when the
    locked row holds exactly that text, and MUST decode the row when anything changed it
    since (here: another store's progress report, which bumps no revision — another
    process, in effect: a write of this store's own is remembered as it writes it); both
    completions apply from the right snapshot.

    Troubleshooting: ``SQLStore.decoded`` is keyed by task id and compared by stored text;
    a hit on other text would decide a transition on a stale snapshot.
    """
    clock = ManualClock()
    store = closing(await any_opener(clock=clock))
    namespace = store.tables.prefix.rstrip("_") or None
    other = closing(SQLStore(engine=store.engine, namespace=namespace,
                             clock=clock))
    decoded: list[str] = []
    real = _codec.decode_snapshot

    def counting(task_id: str, text: Any) -> Snapshot:
        decoded.append(task_id)
        return real(task_id, text)

    monkeypatch.setattr(_codec, "decode_snapshot", counting)
    for task_id in ("same", "moved"):
        await store.create(new_task(task_id))
    claims = {c.snapshot.id: c for c in await store.claim_next(
        "w-reuse", LEASE_S, queues=["default"], limit=2)}
    await other.report_progress(claims["moved"].lease, 50.0, "half")
    decoded.clear()
    results = await store.transition_many([
        (task_id, 0, Completed(event_id=f"done-{task_id}", result=task_id), claims[task_id].lease)
        for task_id in ("same", "moved")
    ])
    assert [getattr(r, "outcome", r) for r in results] == ["applied"] * 2
    assert "same" not in decoded
    assert "moved" in decoded
    monkeypatch.undo()
    stored = {s.id: s for s in await store.list(TaskQuery(tenant=None))}
    for task_id in ("same", "moved"):
        assert (stored[task_id].status, stored[task_id].result) == (TaskStatus.COMPLETED,
                                                                    task_id)
    assert stored["moved"].progress is not None


def test_decoded_snapshots_are_given_back_once_for_the_same_text_and_bounded() -> None:
    """``Decoded`` MUST give a kept snapshot back only for the exact text, only once, and
    keep at most ``size`` entries (the oldest dropped)."""
    snapshot = rules.new_snapshot(new_task("a"), ManualClock().now())
    kept = Decoded(size=2)
    kept.keep("a", "text-a", snapshot)
    assert kept.take("a", "other text") is None
    assert kept.take("a", "text-a") is None  # a miss forgets the entry too
    kept.keep("a", "text-a", snapshot)
    assert kept.take("a", "text-a") is snapshot
    assert kept.take("a", "text-a") is None
    for task_id in ("a", "b", "c"):
        kept.keep(task_id, f"text-{task_id}", snapshot)
    assert kept.take("a", "text-a") is None
    assert kept.take("c", "text-c") is snapshot
