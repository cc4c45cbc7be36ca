"""A pure Python model of what the runtime promises about each task.

No tasks_core rules are used here: this is an independent restatement of docs/design.md
and docs/runtime.md
(statuses, leases, retries, input, visibility, expiry) in plain Python, in whole
milliseconds since the start of the run. :mod:`tasks_contract_tests.runtime_machine`
drives an ``App`` and this model side by side and compares what the App shows with what
the model says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tasks_core import Owner, System

__all__ = ["Handle", "Model", "Outcome", "TaskModel"]

LIVE = ("pending", "waiting_input")
TERMINAL = ("completed", "failed", "cancelled")


class Outcome(Exception):
    """The model's prediction of an error: the error class name (and, for ``Deferred``,
    the seconds)."""

    def __init__(self, name: str, seconds: float | None = None) -> None:
        super().__init__(name)
        self.name = name
        self.seconds = seconds


@dataclass
class Handle:
    """A lease as the model knows it: its task, run, generation and number."""

    number: int
    task_id: str
    run: int
    generation: int
    worker: str
    revision: int

    def __repr__(self) -> str:
        return f"<lease#{self.number} {self.task_id} g{self.generation}>"


@dataclass
class TaskModel:
    """One task's run as the model sees it."""

    id: str
    tenant: str
    owner: Owner | None
    watchers: list[Owner]
    run: int
    created_at: int
    ttl_ms: int | None
    retention_ms: int | None
    attempts: int
    delay_ms: int
    max_deliveries: int
    input: Any = None
    status: str = "pending"
    revision: int = 0
    updated_at: int = 0
    finished_at: int | None = None
    result: Any = None
    error: str | None = None
    retry_count: int = 0
    retry_at: int | None = None
    last_failure: str | None = None
    deliveries: int = 0
    generation: int = 0
    holder: int | None = None
    worker: str | None = None
    lease_expires: int | None = None
    lease_ended: bool = False
    recovered: bool = False
    asked: list[str] = field(default_factory=list)
    outstanding: list[str] = field(default_factory=list)
    answers: dict[str, Any] = field(default_factory=dict)
    applied: dict[str, Any] = field(default_factory=dict)
    history: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def terminal(self) -> bool:
        """Completed, failed or cancelled."""
        return self.status in TERMINAL

    def expires_at(self) -> int | None:
        """min(created + ttl, finished + retention), or ``None``."""
        candidates = []
        if self.ttl_ms is not None:
            candidates.append(self.created_at + self.ttl_ms)
        if self.finished_at is not None and self.retention_ms is not None:
            candidates.append(self.finished_at + self.retention_ms)
        return min(candidates) if candidates else None

    def expired(self, now: int) -> bool:
        """Past ``expires_at``."""
        at = self.expires_at()
        return at is not None and now >= at

    def gone(self, now: int) -> bool:
        """Expired, and not held past its TTL by a live lease (``rules.gone``)."""
        return self.expired(now) and (self.terminal or not self.lease_live(now))

    def lease_live(self, now: int) -> bool:
        """A lease that has neither ended nor expired."""
        return (self.lease_expires is not None and not self.lease_ended
                and now < self.lease_expires)

    def shown_status(self, now: int) -> str:
        """The status a reader sees (``running`` derived)."""
        if self.status == "pending" and self.lease_live(now):
            return "running"
        return self.status

    def claimable(self, now: int) -> bool:
        """Whether a claim may take it now."""
        return (not self.terminal and not self.expired(now) and self.status != "waiting_input"
                and not self.lease_live(now)
                and (self.retry_at is None or self.retry_at <= now))

    def is_member(self, principal: Owner) -> bool:
        """Owner or watcher."""
        return principal == self.owner or principal in self.watchers

    def visible_to(self, principal: Owner | System, visibility: str, now: int) -> bool:
        """Whether ``principal`` may read it now."""
        if self.expired(now):
            return False
        if isinstance(principal, System):
            return principal.tenant in (None, self.tenant)
        if principal.tenant != self.tenant:
            return False
        return visibility == "tenant" or self.is_member(principal)

    def holds(self, handle: Handle) -> bool:
        """Whether ``handle`` is exactly the current lease (token) of this run."""
        return handle.run == self.run and self.holder == handle.number


class Model:
    """Every task the model knows, and the clock (milliseconds since the start)."""

    def __init__(self, visibility: str) -> None:
        self.visibility = visibility
        self.now = 0
        self.tasks: dict[str, TaskModel] = {}
        self.runs = 0
        self.handles = 0

    # -- time ------------------------------------------------------------------------

    def commit(self, task: TaskModel) -> int:
        """The commit instant of the next event: after every earlier write."""
        return max(self.now, task.updated_at + 1)

    def record(self, task: TaskModel, kind: str, event_id: str, content: Any = None) -> int:
        """Apply an event's bookkeeping: revision, history, replay table."""
        at = self.commit(task)
        task.revision += 1
        task.updated_at = at
        task.history.append((kind, task.revision, at))
        task.applied[event_id] = content
        return at

    def finish(self, task: TaskModel, status: str, at: int, *, end_lease: bool) -> None:
        """Make ``task`` terminal at ``at``."""
        task.status = status
        task.finished_at = at
        task.retry_at = None
        task.outstanding = []
        if end_lease and task.lease_expires is not None:
            task.lease_expires = min(task.lease_expires, at)
            task.lease_ended = True

    # -- creation --------------------------------------------------------------------

    def create(self, task_id: str, tenant: str, owner: Owner | None, watchers: list[Owner],
               *, ttl_ms: int | None, retention_ms: int | None, attempts: int, delay_ms: int,
               max_deliveries: int, data: Any, previous: TaskModel | None = None) -> TaskModel:
        """A new task, or a new run replacing ``previous``."""
        self.runs += 1
        task = TaskModel(
            id=task_id, tenant=tenant, owner=owner, watchers=list(watchers), run=self.runs,
            created_at=self.now, ttl_ms=ttl_ms, retention_ms=retention_ms, attempts=attempts,
            delay_ms=delay_ms, max_deliveries=max_deliveries, input=data,
            updated_at=self.now, generation=previous.generation if previous else 0,
        )
        self.tasks[task_id] = task
        return task

    # -- claims and leases -----------------------------------------------------------

    def start(self, task: TaskModel, worker: str, lease_ms: int) -> Handle | None:
        """Claim a claimable task: a handle, or ``None`` when the delivery limit fails it."""
        if task.deliveries >= task.max_deliveries:
            at = self.record(task, "failed", "store:delivery-limit")
            task.error = "DeliveryLimitExceeded"
            self.finish(task, "failed", at, end_lease=True)
            return None
        self.handles += 1
        task.recovered = task.lease_expires is not None and not task.lease_ended
        task.generation += 1
        task.deliveries += 1
        task.holder = self.handles
        task.worker = worker
        task.lease_expires = self.now + lease_ms
        task.lease_ended = False
        task.retry_at = None
        task.updated_at = max(self.now, task.updated_at)
        return Handle(self.handles, task.id, task.run, task.generation, worker, task.revision)

    def claim(self, task_id: str, worker: str, lease_ms: int) -> Handle:
        """An exact claim.

        Raises:
            Outcome: ``TaskNotFound``, ``Unavailable`` or ``Deferred``.
        """
        task = self.tasks.get(task_id)
        if task is None:
            raise Outcome("TaskNotFound")
        if task.terminal or task.expired(self.now) or task.status == "waiting_input" \
                or task.lease_live(self.now):
            raise Outcome("Unavailable")
        if task.retry_at is not None and task.retry_at > self.now:
            raise Outcome("Deferred", (task.retry_at - self.now) / 1000)
        handle = self.start(task, worker, lease_ms)
        if handle is None:
            raise Outcome("Unavailable")
        return handle

    def claim_next(self, worker: str, lease_ms: int) -> Handle | None:
        """The first claimable task by available instant (a pending retry's ``retry_at``,
        else the creation), then id; delivery-limited ones failed on the way."""
        ready = sorted((t for t in self.tasks.values() if t.claimable(self.now)),
                       key=lambda t: (t.retry_at or t.created_at, t.id))
        for task in ready:
            handle = self.start(task, worker, lease_ms)
            if handle is not None:
                return handle
        return None

    def leased(self, handle: Handle, *, live: bool) -> TaskModel:
        """The task ``handle`` holds.

        Raises:
            Outcome: ``LeaseLost``.
        """
        task = self.tasks.get(handle.task_id)
        if task is None or not task.holds(handle):
            raise Outcome("LeaseLost")
        if live and not task.lease_live(self.now):
            raise Outcome("LeaseLost")
        return task

    def renew(self, handle: Handle, lease_ms: int) -> Handle:
        """A new token for a live lease (the old handle goes stale)."""
        task = self.leased(handle, live=True)
        self.handles += 1
        task.holder = self.handles
        task.lease_expires = self.now + lease_ms
        task.updated_at = max(self.now, task.updated_at)
        return Handle(self.handles, task.id, task.run, task.generation, handle.worker,
                      task.revision)

    def release(self, handle: Handle) -> None:
        """End the lease now (expiry not checked)."""
        task = self.leased(handle, live=False)
        if task.lease_expires is not None:
            task.lease_expires = min(task.lease_expires, self.now)
        task.lease_ended = True
        task.updated_at = max(self.now, task.updated_at)

    def worker_event(self, handle: Handle, step: str, content: Any) -> str:
        """A worker event (``completed``, ``failed``, ``retry``, ``input:<key>``) under
        ``handle``: ``applied``, ``duplicate`` or ``unchanged``.

        Raises:
            Outcome: ``TaskNotFound`` (the task is gone) or ``LeaseLost``.
        """
        task = self.tasks.get(handle.task_id)
        if task is None:
            raise Outcome("TaskNotFound")
        event_id = f"{handle.generation}:{step}"
        replayed = event_id in task.applied and handle.run == task.run
        self.leased(handle, live=not replayed)
        if replayed:
            return "duplicate"
        if task.terminal:
            return "unchanged"
        if step.startswith("input:"):
            key = step.removeprefix("input:")
            if key in task.asked:
                return "unchanged"
            self.record(task, "input_requested", event_id, content)
            task.asked.append(key)
            task.outstanding.append(key)
            task.status = "waiting_input"
            return "applied"
        if step == "completed":
            at = self.record(task, "completed", event_id, content)
            task.result = content
            self.finish(task, "completed", at, end_lease=True)
        elif step == "failed":
            at = self.record(task, "failed", event_id, content)
            task.error = "Failed"
            self.finish(task, "failed", at, end_lease=True)
        else:
            at = self.record(task, "retry_requested", event_id, content)
            task.last_failure = "Retryable"
            task.lease_expires = min(task.lease_expires or at, at)
            task.lease_ended = True
            if task.retry_count + 1 < task.attempts:
                task.retry_count += 1
                task.retry_at = at + task.delay_ms
                task.status = "pending"
            else:
                task.error = "Retryable"
                self.finish(task, "failed", at, end_lease=True)
        return "applied"

    # -- requests --------------------------------------------------------------------

    def request(self, task_id: str, principal: Owner | System, right: str) -> TaskModel:
        """The task, if ``principal`` may see it and has ``right``.

        Raises:
            Outcome: ``TaskNotFound`` (missing, expired or invisible) or
                ``AuthorizationError``.
        """
        task = self.tasks.get(task_id)
        if task is None or not task.visible_to(principal, self.visibility, self.now):
            raise Outcome("TaskNotFound")
        if right != "read" and isinstance(principal, Owner) and not task.is_member(principal):
            raise Outcome("AuthorizationError")
        return task

    def cancel(self, task_id: str, principal: Owner | System) -> str:
        """``applied``, ``duplicate`` or ``unchanged``."""
        task = self.request(task_id, principal, "cancel")
        if "cancel" in task.applied:
            return "duplicate"
        if task.terminal:
            return "unchanged"
        at = self.record(task, "cancelled", "cancel")
        task.error = "Cancelled"
        self.finish(task, "cancelled", at, end_lease=False)
        return "applied"

    def respond(self, task_id: str, principal: Owner | System, answers: dict[str, Any]) -> str:
        """``applied``, ``duplicate`` or ``unchanged``."""
        task = self.request(task_id, principal, "respond")
        event_id = f"respond:{len(task.asked)}:{sorted(answers.items())!r}"
        if event_id in task.applied:
            return "duplicate"
        matched = {k: v for k, v in answers.items() if k in task.outstanding}
        if task.terminal or not matched:
            return "unchanged"
        at = self.record(task, "input_responses_accepted", event_id, answers)
        if task.lease_expires is not None and not task.lease_live(at):
            task.lease_expires = min(task.lease_expires, at)  # a dead holder's claim ends
            task.lease_ended = True
        task.outstanding = [k for k in task.outstanding if k not in matched]
        task.answers.update(matched)
        task.status = "waiting_input" if task.outstanding else "pending"
        return "applied"

    def add_watcher(self, task: TaskModel, principal: Owner) -> None:
        """Core grants a watcher at submit."""
        self.record(task, "watcher_added", f"watcher:{principal}")
        task.watchers.append(principal)

    def reap(self) -> list[str]:
        """Delete every task that is gone (expired, no run holding it past its TTL)."""
        gone = sorted(i for i, t in self.tasks.items() if t.gone(self.now))
        for task_id in gone:
            del self.tasks[task_id]
        return gone
