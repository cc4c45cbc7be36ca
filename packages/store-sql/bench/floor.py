"""The runtime's own cost: the burn-down through the same ``Worker`` on a store that does
no work at all — the least any store adds to.

:class:`NoWorkStore` hands out claims made before the clock starts (one ``claim_next``
pops them) and answers each group commit with terminal snapshots made beforehand: no
database, no encoding, no rules. What the burn-down then spends per task is the runtime
alone — claiming loop, runs, handler tasks, the group commit, the event loop. The bench
prints it beside the stores' and pgqueuer's figures: a store's CPU per task less this one
is what the store itself costs (its driver, its round trips, its encoding and rules).

Not a store and not a test: it keeps no promise of the contract beyond what one
burn-down of no-op tasks calls.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime

from tasks_core import rules
from tasks_core.authority import Owner
from tasks_core.errors import TasksError
from tasks_core.events import Transition
from tasks_core.models import Claim, NewTask, Snapshot, TaskStatus, Work
from tasks_store_memory import MemoryStore

__all__ = ["NoWorkStore"]


class NoWorkStore(MemoryStore):
    """``count`` no-op tasks named ``noop``, claimed and completed without any work (see
    the module docstring)."""

    def __init__(self, count: int, owner: Owner) -> None:
        super().__init__()
        now = rules.tick(datetime.now(UTC))
        self._claims: list[Claim] = []
        self._done: dict[str, Snapshot] = {}
        for n in range(count):
            new = NewTask(id=f"floor-{n}", tenant=owner.tenant, owner=owner,
                          work=Work(name="noop", input=None))
            claimed, _, lease, _ = rules.start_claim(rules.new_snapshot(new, now), "floor", 60,
                                                     now)
            assert lease is not None
            self._claims.append(Claim(rules.present(claimed, now), lease))
            self._done[new.id] = claimed.model_copy(
                update={"status": TaskStatus.COMPLETED, "revision": claimed.revision + 1}
            )
        self._claims.reverse()  # popped from the end: oldest first

    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
        start: int | None = None,
    ) -> list[Claim]:
        """Up to ``limit`` of the claims made beforehand."""
        claims = self._claims
        return [claims.pop() for _ in range(min(limit, len(claims)))]

    async def transition_many(
        self, items: Sequence[rules.BatchItem]
    ) -> list[Transition | TasksError]:
        """``applied``, with the terminal snapshot made beforehand, for every item."""
        return [Transition(outcome="applied", snapshot=self._done[item[0]]) for item in items]
