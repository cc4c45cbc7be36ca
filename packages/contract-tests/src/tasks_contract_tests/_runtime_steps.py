"""What the runtime model check does to an ``App`` on the store under test, one step each.

:class:`RuntimeSteps` holds the App (on a ``ManualClock``), the pure model
(:mod:`tasks_contract_tests._runtime_model`) and the lease handles, and has a method per
step: client calls through the App, worker steps made as the worker makes them, and the
clock moving. Each step makes its call, asks the model for the outcome and asserts that
both agree. :mod:`tasks_contract_tests.runtime_machine` chooses the steps and checks
what the App shows after each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, ClassVar, Literal

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from tasks_core import (
    App,
    Completed,
    Deferred,
    Failed,
    InputRequested,
    Lease,
    ManualClock,
    Owner,
    Policy,
    RetryPolicy,
    RetryRequested,
    Snapshot,
    System,
    TaskStore,
)
from tasks_core.authority import scoped_task_key
from tasks_core.events import Event
from tasks_core.runtime._lease import LeaseCell

from tasks_contract_tests._runtime_model import Handle, Model, Outcome, TaskModel

__all__ = ["RuntimeSteps", "StoreFactory"]

StoreFactory = Callable[..., Awaitable[TaskStore]]

ALICE = Owner("alice")
BOB = Owner("bob")
CAROL = Owner("carol")
MALLORY = Owner("mallory", tenant="evil")
SUBMITTERS: tuple[Owner | System, ...] = (ALICE, BOB, MALLORY, System())
PRINCIPALS: tuple[Owner | System, ...] = (ALICE, BOB, CAROL, MALLORY, System(),
                                         System("evil"))
RETENTION_S = 20.0
VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "retry": {"retry": RetryPolicy.fixed(1.0, attempts=3)},
    "fragile": {"max_deliveries": 2},
    "short": {"ttl": 15.0},
}
BACK = st.sampled_from((0, 0, 0, 1, 2, 3))
"""Which lease a worker step uses: mostly the newest (older ones are mostly stale)."""
VARIANT_CHOICES = ("retry", "plain", "fragile", "retry", "short")
ADVANCES = (0.001, 0.5, 1.0, 2.0, 5.0, 11.0, 31.0)


class RuntimeSteps(RuleBasedStateMachine):
    """An ``App`` on ``factory``'s store and the model, and the steps that drive both
    (no rule: :class:`~tasks_contract_tests.runtime_machine.RuntimeMachine` has it)."""

    factory: ClassVar[StoreFactory]
    visibility: ClassVar[Literal["watchers", "tenant"]] = "watchers"

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        self.start = self.clock.now()
        self.model = Model(self.visibility)
        self.store: TaskStore = self.loop.run_until_complete(type(self).factory(clock=self.clock))
        self.app = App(store=self.store, policy=Policy(visibility=self.visibility),
                       retention=RETENTION_S)

        @self.app.task
        async def job(ctx: Any, **kwargs: Any) -> None:  # pragma: no cover - never run
            return None

        self.loop.run_until_complete(self.app.open())
        self.real: dict[int, Lease] = {}
        self.handles: list[Handle] = []
        self.checks = 0
        self.origins: dict[str, tuple[Owner | System, str, Literal["owner", "global"]]] = {}
        self.run_ids: dict[int, str] = {}

    def teardown(self) -> None:
        """Close the store, then the loop."""
        try:
            self.loop.run_until_complete(self.store.aclose())
        finally:
            self.loop.close()

    # -- plumbing --------------------------------------------------------------------

    def _run(self, call: Callable[[], Awaitable[Any]]) -> tuple[Any, BaseException | None]:
        async def wrapped() -> Any:
            return await call()

        try:
            return self.loop.run_until_complete(wrapped()), None
        except Exception as exc:
            return None, exc

    def _expect(self, what: str, error: BaseException | None, predicted: Outcome | None) -> None:
        got = type(error).__name__ if error is not None else None
        want = predicted.name if predicted is not None else None
        assert want == got, f"{what}: the model expects {want or 'success'}, got {got}: {error}"
        if isinstance(error, Deferred) and predicted is not None:
            assert predicted.seconds == error.seconds, f"{what}: Deferred({error.seconds})"

    def _at(self, ms: int | None) -> Any:
        return None if ms is None else self.start + timedelta(milliseconds=ms)

    def _task_ids(
        self, prefer: Callable[[TaskModel], bool] | None = None
    ) -> st.SearchStrategy[str]:
        """A known task id — half the time one that ``prefer`` picks, if any."""
        # Creation order, never sorted ids: random ids differ between replays of one example.
        every = st.sampled_from(list(self.model.tasks) or ["missing"])
        picked = [i for i, t in self.model.tasks.items() if prefer and prefer(t)]
        return st.sampled_from(picked) | every if picked else every

    def _actor(self, data: st.DataObject, task_id: str) -> Owner | System:
        """A member of the task (its owner, or System) half the time, else anyone."""
        task = self.model.tasks.get(task_id)
        member: Owner | System = (task.owner if task else None) or System()
        actor: Owner | System = data.draw(st.just(member) | st.sampled_from(PRINCIPALS),
                                          label="who")
        return actor

    def _pick(self, back: int) -> Handle | None:
        """The ``back``-th newest lease handle (0: the newest), if any."""
        return self.handles[-1 - back] if back < len(self.handles) else None

    # -- client calls ----------------------------------------------------------------

    def submit(self, data: st.DataObject) -> None:
        """Submit through the App: create, join or replace (or be refused)."""
        key: str | None
        again = list(self.origins.items()) if data.draw(st.booleans(), label="again") else []
        if again:  # the same submitter and key again: join, or re-run a finished key
            actor, key, dedup = data.draw(st.sampled_from(again), label="as before")[1]
        else:
            actor = data.draw(st.sampled_from(SUBMITTERS), label="who")
            key = data.draw(st.sampled_from((None, "k1", "k2")), label="key")
            dedup = data.draw(st.sampled_from(("owner", "global")), label="dedup")
        carol = data.draw(st.booleans(), label="watched by carol")
        variant = data.draw(st.sampled_from(VARIANT_CHOICES), label="variant")
        options = VARIANTS[variant]
        watchers = [CAROL] if carol else []
        result, error = self._run(lambda: self.app.submit(
            "job", {"v": variant}, actor, key=key, dedup=dedup, watchers=watchers,
            retention=RETENTION_S, **options))
        try:
            outcome, task = self._submit(actor, key, dedup, watchers, variant)
        except Outcome as predicted:
            self._expect("submit", error, predicted)
            return
        self._expect("submit", error, None)
        if task is None:  # a random id: learn it
            assert result.id not in self.model.tasks, "a random id collided"
            task = self._new(result.id, actor, watchers, variant)
        assert (outcome, task.id) == (result.outcome, result.id), f"submit: {result!r}"
        self._runs(task.run, result.run_id)
        if key is not None and outcome == "created":
            self.origins[task.id] = (actor, key, dedup)

    def _new(self, task_id: str, actor: Owner | System, watchers: list[Owner], variant: str,
             previous: TaskModel | None = None) -> TaskModel:
        options = VARIANTS[variant]
        retry: RetryPolicy = options.get("retry", RetryPolicy.none())
        owner = actor if isinstance(actor, Owner) else None
        granted = [w for w in dict.fromkeys(watchers) if w != owner]
        ttl = options.get("ttl")
        return self.model.create(
            task_id, actor.tenant or "default", owner, granted,
            ttl_ms=None if ttl is None else round(ttl * 1000),
            retention_ms=round(RETENTION_S * 1000), attempts=retry.attempts,
            delay_ms=round(retry.delay_s * 1000),
            max_deliveries=options.get("max_deliveries", 25), data={"v": variant},
            previous=previous)

    def _submit(self, actor: Owner | System, key: str | None, dedup: str,
                watchers: list[Owner], variant: str) -> tuple[str, TaskModel | None]:
        owner = actor if isinstance(actor, Owner) else None
        tenant = actor.tenant or "default"
        if any(w.tenant != tenant for w in watchers):
            raise Outcome("InvalidInput")
        if key is None:
            if dedup != "owner":  # dedup applies to a key: refused, never ignored
                raise Outcome("InvalidInput")
            return "created", None
        if owner is None and dedup == "owner":
            raise Outcome("InvalidInput")
        task_id = scoped_task_key(key, owner, dedup=dedup, tenant=tenant)
        current = self.model.tasks.get(task_id)
        if current is None:
            return "created", self._new(task_id, actor, watchers, variant)
        if current.expired(self.model.now):  # a missing task: a new one, unless a run holds it
            if not current.gone(self.model.now):
                raise Outcome("Unavailable")
            return "replaced", self._new(task_id, actor, watchers, variant, current)
        candidates = ([owner] if owner else []) + [w for w in watchers if w != owner]
        newcomers = [p for p in dict.fromkeys(candidates) if not current.is_member(p)]
        if owner is not None and owner != current.owner and newcomers:
            raise Outcome("AuthorizationError")
        if not current.terminal and not current.expired(self.model.now):
            for principal in newcomers:
                self.model.add_watcher(current, principal)
            return "joined", current
        task = self._new(task_id, actor, [*current.watchers, *newcomers], variant, current)
        task.owner = current.owner
        task.watchers = [*current.watchers, *newcomers]
        return "replaced", task

    def _runs(self, run: int, run_id: str) -> None:
        known = self.run_ids.setdefault(run, run_id)
        assert known == run_id, f"model run {run}: run id {run_id!r}, expected {known!r}"
        assert list(self.run_ids.values()).count(run_id) == 1, f"run id {run_id!r} reused"

    def cancel(self, data: st.DataObject) -> None:
        """Cancel through the App."""
        task_id = data.draw(self._task_ids(lambda t: not t.terminal), label="task")
        actor = self._actor(data, task_id)
        result, error = self._run(lambda: self.app.cancel(task_id, actor))
        try:
            self.model.cancel(task_id, actor)
        except Outcome as predicted:
            self._expect("cancel", error, predicted)
            return
        self._expect("cancel", error, None)
        assert self.model.tasks[task_id].status == result.status, "cancel"

    def respond(self, data: st.DataObject) -> None:
        """Answer through the App."""
        keys = data.draw(st.sampled_from((("q1",), ("q2",), ("q1", "q2"), ("zz",))),
                         label="keys")
        task_id = data.draw(self._task_ids(lambda t: bool(t.outstanding)), label="task")
        actor = self._actor(data, task_id)
        answers = {k: {"answer": k} for k in keys}
        result, error = self._run(lambda: self.app.respond(task_id, answers, actor))
        try:
            outcome = self.model.respond(task_id, actor, answers)
        except Outcome as predicted:
            self._expect("respond", error, predicted)
            return
        self._expect("respond", error, None)
        assert outcome == result.outcome, f"respond: {result.outcome}, model {outcome}"

    def release_task(self, data: st.DataObject) -> None:
        """Admin: delete a finished task through the App."""
        task_id = data.draw(self._task_ids(lambda t: t.terminal), label="task")
        _, error = self._run(lambda: self.app.release(task_id, System()))
        try:
            task = self.model.request(task_id, System(), "read")
            if not task.terminal:
                raise Outcome("Unavailable")
        except Outcome as predicted:
            self._expect("release", error, predicted)
            return
        self._expect("release", error, None)
        del self.model.tasks[task_id]

    def advance(self, data: st.DataObject) -> None:
        """Move the clock (leases expire, retries come due, tasks expire); maybe reap."""
        seconds = data.draw(st.sampled_from(ADVANCES), label="seconds")
        reap = data.draw(st.booleans(), label="reap")
        self.clock.advance(seconds)
        self.model.now += round(seconds * 1000)
        if reap:
            reaped, error = self._run(lambda: self.app.reap(System(), limit=1000))
            self._expect("reap", error, None)
            assert self.model.reap() == sorted(reaped), "reap"

    # -- worker steps ----------------------------------------------------------------

    def _handle(self, handle: Handle, lease: Lease, snapshot: Snapshot) -> None:
        assert (handle.task_id, handle.generation) == (lease.task_id, lease.generation)
        task = self.model.tasks[handle.task_id]
        assert snapshot.claim is not None
        assert (task.deliveries, task.recovered) == (snapshot.deliveries,
                                                     snapshot.claim.recovered), "claim"
        self.real[handle.number] = lease
        self.handles.append(handle)

    def claim_next(self, data: st.DataObject) -> None:
        """Claim the oldest claimable task, as a worker's loop does."""
        worker = data.draw(st.sampled_from(("w1", "w2")), label="worker")
        lease_for = data.draw(st.sampled_from((2, 30)), label="lease_for")
        claims, error = self._run(lambda: self.store.claim_next(
            worker, float(lease_for), queues=["default"], limit=1))
        self._expect("claim_next", error, None)
        handle = self.model.claim_next(worker, lease_for * 1000)
        got = [c.snapshot.id for c in claims]
        assert ([handle.task_id] if handle else []) == got, f"claim_next took {got}"
        if handle is not None:
            self._handle(handle, claims[0].lease, claims[0].snapshot)

    def claim(self, data: st.DataObject) -> None:
        """Claim one exact task."""
        worker = data.draw(st.sampled_from(("w1", "w2")), label="worker")
        task_id = data.draw(self._task_ids(lambda t: t.retry_at is not None), label="task")
        claimed, error = self._run(lambda: self.store.claim(task_id, worker, 30.0))
        try:
            handle = self.model.claim(task_id, worker, 30_000)
        except Outcome as predicted:
            self._expect("claim", error, predicted)
            return
        self._expect("claim", error, None)
        self._handle(handle, claimed.lease, claimed.snapshot)

    def _write(self, handle: Handle, step: str, event: Event, content: Any) -> None:
        lease = self.real[handle.number]
        result, error = self._run(lambda: LeaseCell(self.store, lease, 30.0).write(event,
                                                                            handle.revision))
        try:
            outcome = self.model.worker_event(handle, step, content)
        except Outcome as predicted:
            self._expect(f"{step} by {handle!r}", error, predicted)
            return
        self._expect(f"{step} by {handle!r}", error, None)
        assert outcome == result.outcome, f"{step} by {handle!r}: {result.outcome}, model " \
                                          f"{outcome}"

    def _event_id(self, handle: Handle, step: str) -> str:
        return f"{self.run_ids.get(handle.run, 'gone')}:{handle.generation}:{step}"

    def complete(self, data: st.DataObject) -> None:
        """The handler returns: the holder of one of the newest leases completes the run."""
        back = data.draw(BACK, label="lease (0: newest)")
        handle = self._pick(back)
        if handle is None:
            return
        result = {"by": handle.generation}
        event = Completed(event_id=self._event_id(handle, "completed"), result=result)
        self._write(handle, "completed", event, result)

    def fail(self, data: st.DataObject) -> None:
        """The handler fails for good (unrecoverable, timeout, unknown task)."""
        back = data.draw(BACK, label="lease (0: newest)")
        handle = self._pick(back)
        if handle is None:
            return
        event = Failed(event_id=self._event_id(handle, "failed"), error="Failed",
                       message="broken")
        self._write(handle, "failed", event, None)

    def retry(self, data: st.DataObject) -> None:
        """The handler raised: the holder asks for a retry."""
        back = data.draw(BACK, label="lease (0: newest)")
        handle = self._pick(back)
        if handle is None:
            return
        event = RetryRequested(event_id=self._event_id(handle, "retry"), error="Retryable",
                               message="again")
        self._write(handle, "retry", event, None)

    def ask(self, data: st.DataObject) -> None:
        """The handler asks a person for input."""
        back = data.draw(BACK, label="lease (0: newest)")
        key = data.draw(st.sampled_from(("q1", "q2")), label="key")
        handle = self._pick(back)
        if handle is None:
            return
        request = {"question": key}
        event = InputRequested(event_id=self._event_id(handle, f"input:{key}"), key=key,
                               request=request)
        self._write(handle, f"input:{key}", event, request)

    def renew(self, data: st.DataObject) -> None:
        """The heartbeat renews the lease (the old token goes stale)."""
        back = data.draw(BACK, label="lease (0: newest)")
        lease_for = data.draw(st.sampled_from((2, 30)), label="lease_for")
        handle = self._pick(back)
        if handle is None:
            return
        claimed, error = self._run(lambda: self.store.renew(self.real[handle.number],
                                                            float(lease_for)))
        try:
            renewed = self.model.renew(handle, lease_for * 1000)
        except Outcome as predicted:
            self._expect(f"renew {handle!r}", error, predicted)
            return
        self._expect(f"renew {handle!r}", error, None)
        self.real[renewed.number] = claimed.lease
        self.handles.append(renewed)

    def release(self, data: st.DataObject) -> None:
        """The run gives the task back (a drain, a parked input request)."""
        back = data.draw(BACK, label="lease (0: newest)")
        handle = self._pick(back)
        if handle is None:
            return
        _, error = self._run(lambda: self.store.release(self.real[handle.number]))
        try:
            self.model.release(handle)
        except Outcome as predicted:
            self._expect(f"release {handle!r}", error, predicted)
            return
        self._expect(f"release {handle!r}", error, None)

    def crash(self, data: st.DataObject) -> None:
        """The worker dies: its lease is abandoned (it expires; another claim recovers)."""
        back = data.draw(BACK, label="lease (0: newest)")
        handle = self._pick(back)
        if handle is not None:
            self.handles.remove(handle)
