"""The two stores of the model check and how one operation runs on both.

:class:`StorePair` holds the store under test and the reference ``MemoryStore``, each on
its own ``ManualClock``, runs every operation on both (:meth:`StorePair._both`) and
asserts the same outcome; it checks that a revision never decreases and a terminal task
stays terminal. The rules are in :mod:`tasks_contract_tests.state_machine`. A failed
check raises :class:`BrokenRule` (the rule broken, the step); the first one starts the
shrink budget (:attr:`StorePair.shrink_seconds`), once spent the next program raises
:class:`ShrinkBudgetSpent` before it opens a store, and ``run_model_check`` reports the
first failing program, unshrunk.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from hypothesis import settings
from hypothesis.stateful import (
    MultipleResults,
    RuleBasedStateMachine,
    multiple,
    run_state_machine_as_test,
)
from tasks_core import (
    Access,
    Claim,
    Lease,
    ManualClock,
    Owner,
    System,
    TaskStatus,
    TaskStore,
)
from tasks_core.events import Event
from tasks_store_memory import MemoryStore

from tasks_contract_tests._model_kit import (
    Result,
    differences_between,
    norm_result,
    outline,
    snapshots_in,
)

__all__ = [
    "AGREE", "ONE_LEASE", "BrokenRule", "LeaseHandle", "SentEvent", "ShrinkBudgetSpent",
    "StorePair", "run_within_budget",
]

T = TypeVar("T")

AGREE = "every call has the reference's outcome: the same result, or the same error"
RUN_IDS = "a replace starts a new run id, and nothing else changes it"
REVISION = "a task's revision never decreases"
TERMINAL = "a terminal task stays terminal"
ONE_LEASE = "at most one lease per task is live, and a store accepts the leases it issued"


class BrokenRule(AssertionError):
    """The store broke ``rule`` (one of the constants above) at ``step`` (the operation)."""

    def __init__(self, rule: str, step: str, detail: str) -> None:
        super().__init__(f"broken rule: {rule}\n  step: {step}\n  {detail}")
        self.rule, self.step = rule, step


class ShrinkBudgetSpent(BaseException):
    """The shrink budget is spent: a ``BaseException``, so that Hypothesis does not take
    it for a failure of the program (it stops the run instead)."""


@dataclass(eq=False)
class LeaseHandle:
    """One lease as both stores issued it (tokens differ, everything else agrees)."""

    subject: Lease
    reference: Lease
    number: int

    def __repr__(self) -> str:
        lease = self.reference
        return f"<lease#{self.number} {lease.task_id} {lease.worker_id} g{lease.generation}>"


@dataclass(eq=False)
class SentEvent:
    """A transition already sent, kept for replaying it."""

    task_id: str
    event: Event
    subject: Lease | Access
    reference: Lease | Access
    expected_revision: int

    def __repr__(self) -> str:
        return f"<sent {self.event.event_id}:{self.event.kind} to {self.task_id}>"


class StorePair(RuleBasedStateMachine):
    """The subject and the reference, and one operation on both (no rule:
    :class:`~tasks_contract_tests.state_machine.StoreModelMachine` has them)."""

    shrink_seconds: ClassVar[float | None] = None
    """Wall seconds Hypothesis may spend shrinking after the first failure (``None``:
    Hypothesis's own caps only)."""
    shrink_deadline: ClassVar[float | None] = None
    """``time.monotonic()`` past which no program starts (set by the first failure)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.subject_clock = ManualClock()
        self.reference_clock = ManualClock()
        self.subject: TaskStore | None = None
        self.reference: MemoryStore | None = None
        self.exclusive_ok = False
        self.revisions: dict[str, int] = {}
        self.handles: list[LeaseHandle] = []
        self.runs: dict[str, str] = {}
        self.runs_back: dict[str, str] = {}
        self.seen: dict[tuple[str, str], tuple[int, TaskStatus]] = {}

    # -- plumbing --------------------------------------------------------------------

    def _run(self, call: Callable[[], Awaitable[T]]) -> Result:
        async def wrapped() -> T:
            return await call()

        try:
            return Result(value=self.loop.run_until_complete(wrapped()))
        except Exception as exc:
            return Result(error=exc)

    def _both(
        self,
        what: str,
        subject: Callable[[TaskStore], Awaitable[T]],
        reference: Callable[[TaskStore], Awaitable[T]] | None = None,
    ) -> tuple[Result, Result]:
        """Run one operation on both stores and assert that they agree."""
        assert self.subject is not None
        assert self.reference is not None
        subject_store, reference_store = self.subject, self.reference
        got = self._run(lambda: subject(subject_store))
        want = self._run(lambda: (reference or subject)(reference_store))
        differences = differences_between(norm_result(got), norm_result(want))
        if differences:
            if type(got.error) is not type(want.error):
                differences = [f"store: {outline(got)}", f"reference: {outline(want)}"]
            detail = "\n  ".join(differences[:12])
            self._broken(AGREE, what, f"the store and the reference disagree\n  {detail}")
        self._observe(got.error or got.value, want.error or want.value)
        return got, want

    def _observe(self, subject: Any, reference: Any) -> None:
        """Track revisions and run ids, and check the per-task invariants."""
        pairs = zip(snapshots_in(subject), snapshots_in(reference), strict=True)
        for mine, model in pairs:
            self.revisions[model.id] = model.revision
            known = self.runs.setdefault(model.run_id, mine.run_id)
            back = self.runs_back.setdefault(mine.run_id, model.run_id)
            if (known, back) != (mine.run_id, model.run_id):
                self._broken(RUN_IDS, f"task {model.id!r}",
                             "the store's run ids do not follow the reference's")
            key = (mine.id, mine.run_id)
            revision, status = self.seen.get(key, (mine.revision, mine.status))
            if mine.revision < revision:
                self._broken(REVISION, f"task {mine.id!r}",
                             f"revision went back from {revision} to {mine.revision}")
            if status.terminal and status != mine.status:
                self._broken(TERMINAL, f"task {mine.id!r}",
                             f"terminal status {status} became {mine.status}")
            self.seen[key] = (mine.revision, mine.status)

    def _broken(self, rule: str, step: str, detail: str) -> None:
        """Raise :class:`BrokenRule`; the first failure starts the shrink budget.

        Raises:
            BrokenRule: always.
        """
        machine = type(self)
        if machine.shrink_seconds is not None and machine.shrink_deadline is None:
            machine.shrink_deadline = time.monotonic() + machine.shrink_seconds
        raise BrokenRule(rule, step, detail)

    def _within_shrink_budget(self) -> None:
        """Stop the run before a program opens a store once the shrink budget is spent.

        Raises:
            ShrinkBudgetSpent: a failure was found ``shrink_seconds`` ago or longer.
        """
        deadline = type(self).shrink_deadline
        if deadline is not None and time.monotonic() >= deadline:
            raise ShrinkBudgetSpent()

    def _member(self, task_id: str) -> Owner | System:
        """The owner of ``task_id`` by the reference (System when it has none or is gone).

        A peek that compares nothing: it only picks who sends the next request.
        """
        assert self.reference is not None
        try:
            owner = self.loop.run_until_complete(self.reference.get(task_id, tenant=None)).owner
        except Exception:
            owner = None
        return owner or System()

    def _handle(self, subject: Claim, reference: Claim) -> LeaseHandle:
        handle = LeaseHandle(subject.lease, reference.lease, len(self.handles))
        self.handles.append(handle)
        return handle

    def teardown(self) -> None:
        """Close both stores, then the loop."""
        try:
            for store in (self.subject, self.reference):
                if store is not None:
                    self.loop.run_until_complete(store.aclose())
        finally:
            self.loop.close()

    def _transition(
        self,
        task_id: str,
        expected: int,
        event: Event,
        authorities: tuple[Lease | Access, Lease | Access],
    ) -> SentEvent | MultipleResults[SentEvent]:
        """Send ``event`` to both stores; keep it to be sent again (``resend``) unless
        refused."""
        mine, model = authorities
        _, want = self._both(
            f"transition({event.kind})",
            lambda s: s.transition(task_id, expected, event, mine),
            lambda s: s.transition(task_id, expected, event, model),
        )
        if want.error is not None:
            return multiple()
        return SentEvent(task_id, event, mine, model, expected)


def run_within_budget(
    machine: Callable[[float | None], type[StorePair]],
    settings_for: Callable[[bool], settings],
    shrink_seconds: float | None,
    *,
    shrink: bool,
) -> None:
    """Run the programs of ``machine(shrink_seconds)`` under ``settings_for(shrink)``;
    when the shrink budget runs out — :class:`ShrinkBudgetSpent`, or an error Hypothesis
    raised because of it (a program it stopped midway can read as inconsistent data
    generation) — run them again (the machine must be seeded) without shrinking, to report
    the first failing program as Hypothesis found it.

    Raises:
        BrokenRule: a program broke a rule.
        AssertionError: a program broke a rule, then passed when run again.
    """
    try:
        run_state_machine_as_test(machine(shrink_seconds), settings=settings_for(shrink))
    except BaseException as exc:
        if not _spent(exc):
            raise
        run_state_machine_as_test(machine(None), settings=settings_for(False))
        raise AssertionError("the model check failed, then passed when run again: the "
                             "store does not behave the same way twice") from None


def _spent(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was caused by, a spent shrink budget."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ShrinkBudgetSpent):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
