"""Model-based checking: drive a store and the reference ``MemoryStore`` side by side.

:class:`StoreModelMachine` is a Hypothesis state machine applying the same random
operations to the store under test and to a ``MemoryStore`` (through
:class:`~tasks_contract_tests._model_pair.StorePair`) and asserting after every step that
they agree: outcomes, snapshots, instants, listings and histories, and leases.

Use :func:`run_model_check` for a one-call run; ``ModelContract`` runs it against the
implementer's ``store_factory``. The factory is called on the machine's own event loop
(in a worker thread under pytest), so it must create stores usable from that loop.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Literal

from hypothesis import seed
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    initialize,
    invariant,
    multiple,
    rule,
)
from tasks_core import (
    Access,
    EventRecord,
    Lease,
    NewTask,
    Owner,
    Snapshot,
    System,
    TaskExists,
    TaskQuery,
    TaskStore,
)
from tasks_core.events import Event
from tasks_store_memory import MemoryStore

from tasks_contract_tests._calls import fuzz_settings
from tasks_contract_tests._model_kit import (
    LEASE_BODIES,
    LIMITS,
    QUEUES,
    REQUEST_BODIES,
    REQUEST_EVENT_IDS,
    TASK_IDS,
    TENANTS,
    WORKER_EVENT_IDS,
    WORKERS,
    forged,
    forges,
    lease_fors,
    make_event,
    new_tasks,
    offsets,
    principals,
    queries,
    some_events,
    task_ids,
)
from tasks_contract_tests._model_pair import (
    ONE_LEASE,
    BrokenRule,
    LeaseHandle,
    SentEvent,
    StorePair,
    run_within_budget,
)

__all__ = ["BrokenRule", "StoreFactory", "make_state_machine", "run_model_check"]

StoreFactory = Callable[..., Awaitable[TaskStore]]
RECENT_LEASES = 16
"""How many of the newest lease handles the per-step lease invariant re-checks."""


def _create(new: NewTask) -> Callable[[TaskStore], Awaitable[Snapshot]]:
    return lambda store: store.create(new)


def _history_of(task_id: str) -> Callable[[TaskStore], Awaitable[list[EventRecord]]]:
    return lambda store: store.history(task_id, tenant=None)


def _worker_snapshot(lease: Lease) -> Callable[[TaskStore], Awaitable[Snapshot]]:
    return lambda store: store.worker_snapshot(lease)


async def _reap_all(store: TaskStore) -> list[str]:
    return sorted(await store.reap(1000))


class StoreModelMachine(StorePair):
    """Drives ``factory``'s store and a ``MemoryStore`` with the same operations.

    Both stores run on their own ``ManualClock``, moved identically, and must agree:

    - every call has the same outcome: the same result, or the same error class (plus the
      error's data: ``current`` snapshot, ``expected`` revision, ``seconds``, ``limit``);
    - snapshots agree on every field except ``run_id`` (random per run: instead the
      subject's run ids must map one-to-one onto the reference's); lease tokens are never
      compared (each store draws its own), so each lease handle holds the pair
      *(subject lease, reference lease)*;
    - timestamps agree exactly: both clocks show the same instant, every store instant is
      a whole millisecond, and the rules (``tasks_core.rules``) fix every derived instant;
    - after every step: the System listing and every history agree, every recent lease
      handle is accepted (``worker_snapshot``) by both or by neither, at most one lease
      per task is live, a task's revision never decreases and a terminal task stays
      terminal.

    The pool is small on purpose (4 task ids, 2 tenants, 3 owners, 2 queues, 2 workers,
    3+3 event ids) so that ids collide, events are replayed, leases go stale and tasks
    expire.
    """

    factory: ClassVar[StoreFactory]
    leases = Bundle("leases")
    sent = Bundle("sent")

    # -- setup -----------------------------------------------------------------------

    @initialize(
        target=leases,
        limits=st.sampled_from(LIMITS),
        tasks=st.lists(new_tasks, min_size=2, max_size=3, unique_by=lambda t: t.id),
        claim_first=st.booleans(),
    )
    def open_stores(
        self, limits: dict[str, int], tasks: list[NewTask], claim_first: bool
    ) -> LeaseHandle | MultipleResults[LeaseHandle]:
        """Open the subject (through the factory) and the reference with the same limits,
        create a few tasks in both and maybe claim the first."""
        self._within_shrink_budget()
        factory = type(self).factory
        self.subject = self.loop.run_until_complete(
            factory(clock=self.subject_clock, **limits)
        )
        self.reference = MemoryStore(
            clock=self.reference_clock,
            max_tasks=limits.get("max_tasks"),
            max_active_tasks_per_scope=limits.get("max_active_tasks_per_scope"),
        )
        self.exclusive_ok = self.subject.capabilities.exclusive_queues
        for new in tasks:
            self._both("create", _create(new))
        if not claim_first:
            return multiple()
        return self.claim(tasks[0].id, WORKERS[0], 30.0)

    # -- creation and reads ----------------------------------------------------------

    @rule(new=new_tasks, replace=st.booleans())
    def create(self, new: NewTask, replace: bool) -> None:
        """Create a task; on ``TaskExists`` optionally replace the current run."""
        got, want = self._both("create", lambda s: s.create(new))
        if replace and isinstance(got.error, TaskExists) and isinstance(want.error, TaskExists):
            mine, model = got.error.current, want.error.current
            self._both(
                "create(replace=)",
                lambda s: s.create(new, replace=mine),
                lambda s: s.create(new, replace=model),
            )

    @rule(task_id=task_ids, tenant=st.sampled_from((None, *TENANTS)))
    def read(self, task_id: str, tenant: str | None) -> None:
        """Read one task and its history within a tenant (or all)."""
        self._both("get", lambda s: s.get(task_id, tenant=tenant))
        self._both("history", lambda s: s.history(task_id, tenant=tenant))

    @rule(query=queries)
    def list_tasks(self, query: TaskQuery) -> None:
        """List with a filter."""
        self._both("list", lambda s: s.list(query))

    # -- claims and leases -----------------------------------------------------------

    @rule(target=leases, task_id=task_ids, worker=st.sampled_from(WORKERS), lease_for=lease_fors)
    def claim(
        self, task_id: str, worker: str, lease_for: float
    ) -> LeaseHandle | MultipleResults[LeaseHandle]:
        """Claim one exact task."""
        got, want = self._both("claim", lambda s: s.claim(task_id, worker, lease_for))
        if got.error is not None:
            return multiple()
        return self._handle(got.value, want.value)

    @rule(
        target=leases,
        worker=st.sampled_from(WORKERS),
        lease_for=lease_fors,
        queues=st.sampled_from((("q1",), ("q2",), QUEUES)),
        limit=st.integers(1, 3),
        exclusive=st.sampled_from(((), (), ("q1",))),
    )
    def claim_next(
        self,
        worker: str,
        lease_for: float,
        queues: tuple[str, ...],
        limit: int,
        exclusive: tuple[str, ...],
    ) -> MultipleResults[LeaseHandle]:
        """Claim the oldest claimable tasks of some queues."""
        exclusive = exclusive if self.exclusive_ok else ()
        got, want = self._both(
            "claim_next",
            lambda s: s.claim_next(
                worker, lease_for, queues=queues, limit=limit, exclusive=exclusive
            ),
        )
        if got.error is not None:
            return multiple()
        pairs = zip(got.value, want.value, strict=True)
        return multiple(*(self._handle(mine, model) for mine, model in pairs))

    @rule(target=leases, handle=leases, forge=forges, lease_for=lease_fors)
    def renew(
        self, handle: LeaseHandle, forge: str, lease_for: float
    ) -> LeaseHandle | MultipleResults[LeaseHandle]:
        """Renew a (possibly stale or forged) lease."""
        mine, model = forged(handle.subject, forge), forged(handle.reference, forge)
        got, want = self._both(
            "renew", lambda s: s.renew(mine, lease_for), lambda s: s.renew(model, lease_for)
        )
        if got.error is not None:
            return multiple()
        return self._handle(got.value, want.value)

    @rule(handle=leases, forge=forges)
    def release(self, handle: LeaseHandle, forge: str) -> None:
        """Release a (possibly stale or forged) lease."""
        mine, model = forged(handle.subject, forge), forged(handle.reference, forge)
        self._both("release", lambda s: s.release(mine), lambda s: s.release(model))

    @rule(
        handle=leases,
        forge=forges,
        value=st.sampled_from((0.0, 50.0, 100.0)),
        message=st.sampled_from((None, "half")),
    )
    def report_progress(
        self, handle: LeaseHandle, forge: str, value: float, message: str | None
    ) -> None:
        """Report progress under a (possibly stale or forged) lease."""
        mine, model = forged(handle.subject, forge), forged(handle.reference, forge)
        self._both(
            "report_progress",
            lambda s: s.report_progress(mine, value, message),
            lambda s: s.report_progress(model, value, message),
        )

    # -- transitions -----------------------------------------------------------------

    @rule(
        target=sent,
        handle=leases,
        event=st.tuples(st.sampled_from(WORKER_EVENT_IDS), st.sampled_from(LEASE_BODIES)).map(
            make_event
        ),
    )
    def work(self, handle: LeaseHandle, event: Event) -> SentEvent | MultipleResults[SentEvent]:
        """The holder sends an event at the current revision (the common path)."""
        task_id = handle.reference.task_id
        pair = (handle.subject, handle.reference)
        return self._transition(task_id, self.revisions.get(task_id, 0), event, pair)

    @rule(
        target=sent,
        handle=leases,
        forge=forges,
        event=some_events(LEASE_BODIES, WORKER_EVENT_IDS),
        offset=offsets,
    )
    def transition_with_lease(
        self, handle: LeaseHandle, forge: str, event: Event, offset: int
    ) -> SentEvent | MultipleResults[SentEvent]:
        """Send an event under a (possibly stale or forged) lease."""
        task_id = handle.reference.task_id
        if forge == "task":  # the exact lease, sent to another task
            task_id = forged(handle.reference, "task").task_id
            forge = "exact"
        pair = (forged(handle.subject, forge), forged(handle.reference, forge))
        return self._transition(task_id, self.revisions.get(task_id, 0) + offset, event, pair)

    @rule(
        target=sent,
        task_id=task_ids,
        principal=principals,
        visibility=st.sampled_from(("watchers", "tenant")),
        event=some_events(REQUEST_BODIES, REQUEST_EVENT_IDS),
        offset=offsets,
    )
    def transition_with_access(
        self,
        task_id: str,
        principal: Owner | System | str,
        visibility: Literal["watchers", "tenant"],
        event: Event,
        offset: int,
    ) -> SentEvent | MultipleResults[SentEvent]:
        """Send an event under request access."""
        if not isinstance(principal, Owner | System):
            principal = self._member(task_id)
        access = Access(principal=principal, visibility=visibility)
        expected = self.revisions.get(task_id, 0) + offset
        return self._transition(task_id, expected, event, (access, access))

    @rule(
        target=sent,
        handle=leases,
        event=st.tuples(
            st.sampled_from(REQUEST_EVENT_IDS), st.sampled_from(REQUEST_BODIES[:4])
        ).map(make_event),
    )
    def answer_or_cancel(
        self, handle: LeaseHandle, event: Event
    ) -> SentEvent | MultipleResults[SentEvent]:
        """A member answers or cancels a task that was claimed (the common request path;
        the lease only picks the task)."""
        task_id = handle.reference.task_id
        access = Access(principal=self._member(task_id), visibility="watchers")
        return self._transition(task_id, self.revisions.get(task_id, 0), event, (access, access))

    @rule(
        previous=sent,
        current_revision=st.booleans(),
        other_body=st.none() | st.sampled_from(LEASE_BODIES + REQUEST_BODIES),
    )
    def resend(
        self, previous: SentEvent, current_revision: bool, other_body: dict[str, Any] | None
    ) -> None:
        """Send an earlier event again by the same authority (a retried call) — or, with
        ``other_body``, other content under the same event id."""
        expected = previous.expected_revision
        if current_revision:
            expected = self.revisions.get(previous.task_id, 0)
        event = previous.event
        if other_body is not None:
            event = make_event((event.event_id, other_body))
        self._transition(previous.task_id, expected, event, (previous.subject, previous.reference))

    # -- time and administration -----------------------------------------------------

    @rule(seconds=st.sampled_from((0.001, 0.5, 1.0, 2.0, 6.0, 31.0)), reap=st.booleans())
    def advance(self, seconds: float, reap: bool) -> None:
        """Move both clocks by the same amount, then maybe reap every expired task (no
        ``limit``: which expired tasks a limit picks is unspecified)."""
        self.subject_clock.advance(seconds)
        self.reference_clock.advance(seconds)
        if reap:
            self._both("reap", _reap_all)

    @rule(task_id=task_ids, offset=offsets)
    def delete(self, task_id: str, offset: int) -> None:
        """Delete a task at (about) its current revision."""
        expected = self.revisions.get(task_id, 0) + offset
        self._both("delete", lambda s: s.delete(task_id, expected_revision=expected))

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def stores_agree(self) -> None:
        """The System listing and every history agree."""
        if self.subject is None:
            return
        self._both("list(all)", lambda s: s.list(TaskQuery(tenant=None, limit=1000)))
        for task_id in TASK_IDS:
            self._both(f"history({task_id})", _history_of(task_id))

    @invariant()
    def at_most_one_live_lease_per_task(self) -> None:
        """Recent leases are accepted alike, and at most one per task is live."""
        if self.subject is None:
            return
        live: dict[str, list[LeaseHandle]] = {}
        for handle in self.handles[-RECENT_LEASES:]:
            got, _ = self._both(
                f"worker_snapshot({handle!r})",
                _worker_snapshot(handle.subject),
                _worker_snapshot(handle.reference),
            )
            if got.error is None:
                live.setdefault(handle.subject.task_id, []).append(handle)
        for task_id, holders in live.items():
            if len(holders) > 1:
                self._broken(ONE_LEASE, f"task {task_id!r}", f"several live leases: {holders}")


_made = itertools.count(1)


def make_state_machine(
    factory: StoreFactory, *, shrink_seconds: float | None = None
) -> type[StoreModelMachine]:
    """A state machine class that checks ``factory``'s stores against the reference.

    Args:
        factory: ``async factory(**options) -> TaskStore``; called with ``clock=`` (and
            sometimes ``max_tasks=`` or ``max_active_tasks_per_scope=``) on the machine's
            own event loop. Every call must return a fresh, empty store.
        shrink_seconds: the shrink budget (``StorePair.shrink_seconds``).

    Returns:
        A ``RuleBasedStateMachine`` subclass (use ``.TestCase`` or Hypothesis's
        ``run_state_machine_as_test``).
    """
    name = f"StoreModelMachine{next(_made)}"
    return type(name, (StoreModelMachine,), {"factory": staticmethod(factory),
                                              "shrink_seconds": shrink_seconds})


def run_model_check(
    factory: StoreFactory,
    *,
    max_examples: int = 100,
    steps: int = 25,
    seed_value: int | None = 0,
    shrink: bool = True,
    shrink_seconds: float | None = 30.0,
) -> None:
    """Run the model check: ``max_examples`` random programs of up to ``steps`` steps,
    deterministic for a given seed (``None``: one drawn here); no example database.

    Args:
        factory: see :func:`make_state_machine`.
        max_examples: how many programs to run.
        steps: the most operations per program.
        seed_value: the Hypothesis seed.
        shrink: shrink a failing program (the costly "explain" phase is off).
        shrink_seconds: the most wall seconds spent shrinking after the first failure
            (``None``: Hypothesis's caps); past them the run stops and runs again, same
            seed, unshrunk, to report the first failing program.

    Raises:
        BrokenRule: an ``AssertionError`` naming the broken rule (``.rule``), the step
            (``.step``: the operation) and what differs; Hypothesis notes the program.
    """
    chosen = random.SystemRandom().getrandbits(64) if seed_value is None else seed_value
    run_within_budget(
        lambda budget: seed(chosen)(make_state_machine(factory, shrink_seconds=budget)),
        lambda shrinking: fuzz_settings(max_examples, steps=steps, derandomize=False,
                                        shrink=shrinking),
        shrink_seconds if shrink else None, shrink=shrink,
    )
