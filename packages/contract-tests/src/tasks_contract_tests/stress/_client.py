"""The client process of the runner soak: submits rounds of tasks, answers the input
requests, cancels the tasks meant to be cancelled, and tries a few bad requests.

    python -m tasks_contract_tests.stress._client --store URL --options JSON --ledger FILE
        --rounds R --tasks T [--seed S] [--deadline SECONDS]

Each round is submitted, then watched until every task of it is terminal, before the
next. Everything it sends is written to its ledger (``submit`` rows carry what each task
must end as). Exit code 0 when every round settled, 3 when the deadline came first.
A store that is briefly unavailable (a restart, a cut connection) is retried; every call
it retries is idempotent (keyed submits, answers by key, cancels).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import secrets
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tasks_core import (
    App,
    Owner,
    Snapshot,
    StoreUnavailable,
    Submitted,
    System,
    TasksError,
    TaskStatus,
)

from tasks_contract_tests.stress._handlers import KINDS, Kind, build_app
from tasks_contract_tests.stress._ledger import Ledger
from tasks_contract_tests.stress._target import add_options_argument

__all__ = ["MIX", "main", "round_kinds"]

log = logging.getLogger("tasks_contract_tests.stress")

T = TypeVar("T")
CLIENT = Owner("stress")
LIVE = ("pending", "running", "claimed", "waiting_input")
MIX = (
    ["plain"] * 4 + ["plain_sync"] * 2 + ["flaky"] * 2 + ["ask"] * 2 + ["ask_sync"]
    + ["cancel"] * 2 + ["poison", "bad_result"]
)
"""Kinds of task per 16 submitted (see ``KINDS``)."""


def round_kinds(tasks: int, rng: random.Random) -> list[str]:
    """The kinds of one round: the mix repeated to ``tasks`` entries, shuffled."""
    kinds = [MIX[i % len(MIX)] for i in range(tasks)]
    rng.shuffle(kinds)
    return kinds


class Client:
    """One soak client; see the module docstring."""

    def __init__(self, app: App, ledger: Ledger, rng: random.Random, deadline: float) -> None:
        self.app = app
        self.ledger = ledger
        self.rng = rng
        self.deadline = deadline
        self.kinds: dict[str, str] = {}
        self.answered: set[str] = set()
        self.cancelled: set[str] = set()
        self.due: dict[str, float] = {}
        self.eager_cancel: set[str] = set()

    def _left(self) -> float:
        return self.deadline - asyncio.get_running_loop().time()

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, again after a transient store failure, until the deadline."""
        while True:
            try:
                return await call()
            except StoreUnavailable:
                if self._left() <= 0:
                    raise
                await asyncio.sleep(0.2)

    async def submit_round(self, number: int, size: int) -> list[str]:
        """Submit one round; return its task ids."""
        ids = []
        for index, name in enumerate(round_kinds(size, self.rng)):
            kind = KINDS[name]
            key = f"r{number}-{index}"

            async def submit(kind: Kind = kind, key: str = key) -> Submitted:
                return await self.app.submit(kind.task, kind.input, CLIENT, key=key)

            submitted = await self._retrying(submit)
            self.kinds[submitted.id] = name
            if kind.cancelled and self.rng.random() < 0.3:
                self.eager_cancel.add(submitted.id)
            self.ledger.record("submit", submitted.id, outcome=submitted.outcome,
                               detail={**kind.expectation(name), "round": number})
            ids.append(submitted.id)
        return ids

    async def settle(self, ids: list[str]) -> bool:
        """Answer and cancel until every task of ``ids`` is terminal; ``False`` at the
        deadline."""
        waiting = set(ids)
        while waiting:
            if self._left() <= 0:
                return False
            live = await self._retrying(self._live)
            waiting &= set(live)
            for task_id in sorted(waiting):
                await self._act(live[task_id])
            await asyncio.sleep(0.1)
        return True

    async def _live(self) -> dict[str, Snapshot]:
        found: dict[str, Snapshot] = {}
        after: str | None = None
        while True:
            page = await self.app.list(CLIENT, status=LIVE, after=after, limit=1000)
            found.update((s.id, s) for s in page.items)
            if page.next_after is None:
                return found
            after = page.next_after

    async def _act(self, snapshot: Snapshot) -> None:
        name = self.kinds.get(snapshot.id, "")
        if name not in KINDS:
            return
        task_id = snapshot.id
        now = asyncio.get_running_loop().time()
        if KINDS[name].cancelled and task_id not in self.cancelled:
            if task_id in self.eager_cancel or snapshot.status == TaskStatus.RUNNING:
                result = await self._retrying(lambda: self.app.cancel(task_id, CLIENT))
                self.cancelled.add(task_id)
                self.ledger.record("cancel", task_id, outcome=result.status.value)
        elif (
            KINDS[name].answered
            and task_id not in self.answered
            and snapshot.status == TaskStatus.WAITING_INPUT
            and "approve" in snapshot.input_requests
        ):
            due = self.due.setdefault(task_id, now + self.rng.uniform(0.0, 2.0))
            if now >= due:
                token = secrets.token_hex(6)
                answer = {"approve": {"token": token}}
                answered = await self._retrying(
                    lambda: self.app.respond(task_id, answer, CLIENT))
                self.answered.add(task_id)
                self.ledger.record("respond", task_id, nonce=token, outcome=answered.outcome)

    async def bad_inputs(self, ids: list[str], *, finished: bool) -> None:
        """Requests that must be refused or change nothing (``bad`` rows)."""
        target = ids[0]
        tries: list[tuple[str, list[str], Callable[[], Awaitable[Any]]]] = [
            ("key with '::'", ["refused:InvalidInput"],
             lambda: self.app.submit("stress.plain", {}, CLIENT, key="bad::key")),
            ("undeclared queue", ["refused:InvalidInput"],
             lambda: self.app.submit("stress.plain", {}, CLIENT, queue="no-such-queue")),
            ("input over the size limit", ["refused:InvalidInput"],
             lambda: self.app.submit("stress.plain", {"pad": "x" * 300_000}, CLIENT)),
            ("NaN in an answer", ["refused:InvalidInput"],
             lambda: self.app.respond(target, {"approve": float("nan")}, CLIENT)),
            ("read from another tenant", ["refused:TaskNotFound"],
             lambda: self.app.get(target, Owner("mallory", tenant="evil"))),
            ("cancel by a stranger", ["refused:TaskNotFound"],
             lambda: self.app.cancel(target, Owner("eve"))),
            ("answer to a question nobody asked", ["unchanged"],
             lambda: self.app.respond(target, {"nobody-asked": 1}, CLIENT)),
        ]
        if finished:
            tries.append(("cancel a finished task", ["unchanged"],
                          lambda: self.app.cancel(target, CLIENT)))
        for what, expect, call in tries:
            before = await self._retrying(lambda: self.app.get(target, System()))
            try:
                value = await self._retrying(call)
            except TasksError as exc:
                outcome = f"refused:{type(exc).__name__}"
            else:
                outcome = _outcome(value, before)
            self.ledger.record("bad", target, outcome=outcome,
                               detail={"what": what, "expect": expect})


def _outcome(value: Any, before: Snapshot) -> str:
    """``unchanged`` when a request that did not raise left the task as it was."""
    outcome = getattr(value, "outcome", None)
    snapshot = getattr(value, "snapshot", value)
    if outcome == "unchanged":
        return "unchanged"
    if isinstance(snapshot, Snapshot) and outcome is None and before.terminal \
            and snapshot.revision == before.revision:
        return "unchanged"
    return f"accepted:{outcome or type(value).__name__}"


async def _drive(args: argparse.Namespace) -> int:
    ledger = Ledger(args.ledger, "client")
    app = build_app(url=args.store, store_options=json.loads(args.options))
    loop = asyncio.get_running_loop()
    try:
        async with app:
            await app.store.now()
            print("ready", flush=True)
            client = Client(app, ledger, random.Random(args.seed), loop.time() + args.deadline)
            for number in range(args.rounds):
                ids = await client.submit_round(number, args.tasks)
                await client.bad_inputs(ids, finished=False)
                if not await client.settle(ids):
                    print("deadline", flush=True)
                    return 3
                await client.bad_inputs(ids, finished=True)
            print("done", flush=True)
            return 0
    finally:
        ledger.close()


def main(argv: list[str] | None = None) -> int:
    """Run the client; return its exit code."""
    parser = argparse.ArgumentParser(prog="python -m tasks_contract_tests.stress._client")
    add_options_argument(parser)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deadline", type=float, default=300.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return asyncio.run(_drive(args))


if __name__ == "__main__":
    sys.exit(main())
