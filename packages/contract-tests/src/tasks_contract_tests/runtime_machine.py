"""Model-based checking of the runtime: an ``App`` on your store against a pure model.

:class:`RuntimeMachine` is a Hypothesis state machine: each step is a client call through
the App, a worker step or the clock moving (:mod:`tasks_contract_tests._runtime_steps`),
and a pure model written from docs/runtime.md (:mod:`tasks_contract_tests._runtime_model`,
not from ``tasks_core.rules``) predicts every outcome. After every step each task as the
App shows it, its history and every principal's view agree with the model.

Use :func:`run_runtime_model_check` for a one-call run.
"""

from __future__ import annotations

import itertools
from typing import Literal

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test
from tasks_core import Owner, Snapshot, System, TaskNotFound

from tasks_contract_tests._calls import fuzz_settings
from tasks_contract_tests._runtime_model import TaskModel
from tasks_contract_tests._runtime_steps import PRINCIPALS, RuntimeSteps, StoreFactory

__all__ = ["RuntimeMachine", "StoreFactory", "make_runtime_machine",
           "run_runtime_model_check"]

STEPS = ("submit", "claim_next", "complete", "advance", "submit", "claim_next", "retry",
         "ask", "respond", "cancel", "renew", "claim", "fail", "respond", "release",
         "crash", "advance", "release_task", "claim_next", "retry", "ask", "complete")
"""The steps, weighted by repetition (simpler ones first: Hypothesis shrinks toward them)."""


class RuntimeMachine(RuntimeSteps):
    """Drives an ``App`` on ``factory``'s store and the model with the same steps.

    The App runs on the store under test (through ``factory``, on a ``ManualClock``) and is
    driven with the client API — ``submit`` (keys, global keys, watchers, retry policies,
    delivery limits, TTLs), ``cancel``, ``respond``, ``release``, ``reap`` — and with
    explicit worker steps made the way the worker makes them: ``claim_next``/``claim`` on
    the store, writes through the runtime's ``LeaseCell`` (``completed``, ``failed``, a
    retry, an input request, with the worker's event ids), ``renew``, ``release``, and
    *crashes* (a lease simply abandoned). The clock moves so that leases expire (and are
    recovered), retries come due and finished or short-lived tasks expire.

    After every step the machine checks through the App that each task's status, revision,
    result, error, retry count, deliveries, lease (generation, expiry, ``recovered``),
    input requests and answers, instants (created, updated, finished, retry, expiry) and
    history agree with the model; that every principal sees exactly the tasks the model
    says (``get`` and ``list``), and that an invisible task is reported exactly like a
    missing one; and that run ids map one-to-one onto the model's runs.
    """

    # -- the rule --------------------------------------------------------------------
    # One rule choosing among weighted steps (rather than one rule per step): Hypothesis
    # disables random subsets of rules per program ("swarm testing"), which with a few
    # dozen programs would leave whole areas (every worker write, say) untested.

    @rule(step=st.sampled_from(STEPS), data=st.data())
    def act(self, step: str, data: st.DataObject) -> None:
        """One step: a client call through the App, a worker step, or the clock moving."""
        needs_task = step in ("cancel", "respond", "release_task", "claim")
        needs_lease = step in ("complete", "fail", "retry", "ask", "renew", "release", "crash")
        if (needs_task and not self.model.tasks) or (needs_lease and not self.handles):
            step = "submit" if needs_task else "claim_next"
        getattr(self, step)(data)

    # -- what the App shows ----------------------------------------------------------

    def _compare(self, task: TaskModel, snapshot: Snapshot) -> None:
        now = self.model.now
        claim = snapshot.claim
        got = {
            "status": snapshot.status.value, "revision": snapshot.revision,
            "owner": snapshot.owner, "watchers": sorted(map(str, snapshot.watchers)),
            "input": snapshot.work.input, "deliveries": snapshot.deliveries,
            "retry_count": snapshot.retry_count, "retry_at": snapshot.retry_at,
            "result": snapshot.result, "error": snapshot.error and snapshot.error.type,
            "last_failure": snapshot.last_failure and snapshot.last_failure.type,
            "asks": sorted(snapshot.input_requests), "answers": snapshot.accepted_input_responses,
            "generation": claim and claim.generation, "worker": claim and claim.worker_id,
            "lease_expires": claim and claim.expires_at, "lease_ended": claim and claim.ended,
            "created_at": snapshot.created_at, "updated_at": snapshot.updated_at,
            "finished_at": snapshot.finished_at, "expires_at": snapshot.expires_at,
        }
        held = task.lease_expires is not None
        want = {
            "status": task.shown_status(now), "revision": task.revision, "owner": task.owner,
            "watchers": sorted(map(str, task.watchers)), "input": task.input,
            "deliveries": task.deliveries, "retry_count": task.retry_count,
            "retry_at": self._at(task.retry_at), "result": task.result, "error": task.error,
            "last_failure": task.last_failure, "asks": sorted(task.outstanding),
            "answers": task.answers,
            "generation": task.generation if held else None,
            "worker": task.worker if held else None,
            "lease_expires": self._at(task.lease_expires),
            "lease_ended": task.lease_ended if held else None,
            "created_at": self._at(task.created_at), "updated_at": self._at(task.updated_at),
            "finished_at": self._at(task.finished_at), "expires_at": self._at(task.expires_at()),
        }
        differences = [f"{k}: app={got[k]!r} model={want[k]!r}" for k in want
                       if got[k] != want[k]]
        assert not differences, f"task {task.id!r}:\n  " + "\n  ".join(differences)
        self._runs(task.run, snapshot.run_id)

    @invariant()
    def app_agrees_with_the_model(self) -> None:
        """Every task, history, visibility and listing agrees with the model."""
        now = self.model.now
        for task in list(self.model.tasks.values()):
            snapshot, error = self._run(lambda t=task: self.app.get(t.id, System()))  # type: ignore[misc]
            if task.expired(now):
                assert isinstance(error, TaskNotFound), f"expired {task.id!r} still readable"
                continue
            assert error is None, f"get({task.id!r}): {error!r}"
            self._compare(task, snapshot)
            history, error = self._run(lambda t=task: self.app.history(t.id, System()))  # type: ignore[misc]
            assert error is None, f"history({task.id!r}): {error!r}"
            got = [(r.kind, r.revision, r.committed_at) for r in history]
            want = [(k, rev, self._at(at)) for k, rev, at in task.history]
            assert want == got, f"history of {task.id!r}"
        self.checks += 1
        for number, principal in enumerate(PRINCIPALS):
            # Every principal's listing each step; its reads of every task in turn.
            self._check_visibility(principal, reads=number == self.checks % len(PRINCIPALS))

    def _check_visibility(self, principal: Owner | System, *, reads: bool) -> None:
        now, visibility = self.model.now, self.model.visibility
        visible = sorted(t.id for t in self.model.tasks.values()
                         if t.visible_to(principal, visibility, now))
        page, error = self._run(lambda: self.app.list(principal, limit=1000))
        assert error is None, f"list as {principal}: {error!r}"
        assert visible == [s.id for s in page], f"list as {principal}"
        for task_id in sorted(self.model.tasks) if reads else ():
            _, error = self._run(lambda i=task_id: self.app.get(i, principal))  # type: ignore[misc]
            if task_id in visible:
                assert error is None, f"{principal} cannot read {task_id!r}: {error!r}"
            else:
                assert isinstance(error, TaskNotFound), f"{principal} reads {task_id!r}"
                assert str(TaskNotFound(task_id)) == str(error), "not found, differently"


_made = itertools.count(1)


def make_runtime_machine(
    factory: StoreFactory, *, visibility: Literal["watchers", "tenant"] = "watchers"
) -> type[RuntimeMachine]:
    """A state machine class checking an ``App`` on ``factory``'s stores against the model.

    Args:
        factory: ``async factory(**options) -> TaskStore``, called with ``clock=`` on the
            machine's own event loop; every call must return a fresh, empty store.
        visibility: the App's ``Policy(visibility=…)``.
    """
    name = f"RuntimeMachine{next(_made)}"
    attributes = {"factory": staticmethod(factory), "visibility": visibility}
    return type(name, (RuntimeMachine,), attributes)


def run_runtime_model_check(
    factory: StoreFactory,
    *,
    max_examples: int = 30,
    steps: int = 30,
    visibility: Literal["watchers", "tenant"] = "watchers",
) -> None:
    """Run the runtime model check: ``max_examples`` programs of up to ``steps`` steps,
    deterministic (``derandomize``), nothing kept in a Hypothesis database.

    Raises:
        AssertionError: the App disagreed with the model; the message names the step or the
            differing fields, and Hypothesis notes the shrunk program.
    """
    run_state_machine_as_test(
        make_runtime_machine(factory, visibility=visibility),
        settings=fuzz_settings(max_examples, steps=steps),
    )
