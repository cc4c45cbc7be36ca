"""Bad input through every client call, the sync facade and the CLI; forged leases.

:func:`run_client_fuzz`: a call with hostile arguments (:mod:`tasks_contract_tests.fuzz`)
either succeeds and what it stored reads back exactly, or raises a named error of the tree
(never a ``StoreError``) and changes nothing. :func:`run_lease_fuzz`: a forged lease is
refused with ``LeaseLost`` and changes nothing. Both run on a loop of their own (call them
from a thread, or from a sync test), are deterministic (``derandomize``) and keep nothing
in a Hypothesis database.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from tasks_core import (
    App,
    Completed,
    Failed,
    InputRequested,
    Lease,
    LeaseLost,
    ManualClock,
    Owner,
    RetryRequested,
    StoreError,
    System,
    TasksError,
    TaskStore,
    TaskTimeout,
)
from tasks_core.authority import scoped_task_key
from tasks_core.cli import run as cli_run
from tasks_core.events import Event

from tasks_contract_tests._calls import (
    ALICE,
    BOB,
    LEASE_S,
    MALLORY,
    NASTY,
    Call,
    catalogue,
    client_calls,
    fuzz_settings,
    short,
)
from tasks_contract_tests.fuzz import forged_leases, masked, store_fingerprint

__all__ = ["NASTY", "Call", "StoreFactory", "catalogue", "check_call", "client_calls",
           "fuzz_settings", "run_client_fuzz", "run_lease_fuzz"]

StoreFactory = Callable[..., Awaitable[TaskStore]]
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
"""Characters that must never reach the terminal (newline excepted)."""


# -- the world ---------------------------------------------------------------------------


@dataclass
class World:
    """An app on the store under test, with tasks in every state."""

    store: TaskStore
    app: App
    twin: App | None
    ids: list[str]
    leases: list[Lease]
    last: Any = None

    @classmethod
    async def open(cls, factory: StoreFactory, *, sync_twin: bool = True) -> World:
        """Open the store and put a pending, a running, a waiting and a finished task in;
        with ``sync_twin``, a second App on the same store for ``app.sync`` calls."""
        store = await factory(clock=ManualClock())
        app = _app(store)
        await app.open()
        pending = await app.submit("job", {"secret": "input-secret"}, ALICE, key="k1")
        running = await app.submit("job", None, ALICE, key="k2", watchers=[BOB])
        waiting = await app.submit("job", None, BOB, key="k3")
        done = await app.submit("job", None, System(), key="g1", dedup="global")
        mallory = await app.submit("job", None, MALLORY, key="k1")
        leases = []
        for sub in (running, waiting, done):
            claimed = await store.claim(sub.id, "w1", LEASE_S)
            leases.append(claimed.lease)
        await store.transition(waiting.id, 0, InputRequested(event_id="ask", key="q"),
                               leases[1])
        await store.transition(done.id, 0, Completed(event_id="done", result={"r": 1}),
                               leases[2])
        await store.report_progress(leases[0], 10.0, NASTY)
        failed = await app.submit("job", None, ALICE, key="k4")
        claimed = await store.claim(failed.id, "w1", LEASE_S)
        await store.transition(failed.id, 0, Failed(event_id="f", error="Boom", message=NASTY),
                               claimed.lease)
        ids = [pending.id, running.id, waiting.id, done.id, mallory.id, failed.id]
        return cls(store, app, _app(store) if sync_twin else None, ids, leases[:2])

    async def close(self) -> None:
        """Close the twin's sync loop and the store."""
        if self.twin is not None:
            await asyncio.to_thread(self.twin.sync.close)
        await self.store.aclose()

    async def fingerprint(self) -> Any:
        """Every task, the histories of the world's own tasks, and whether the held leases
        still hold (remembered as ``last``)."""
        self.last = await store_fingerprint(self.store, histories=self.ids[:6],
                                            leases=self.leases)
        return self.last


def _app(store: TaskStore) -> App:
    app = App(store=store, queues=["other"])

    @app.task
    async def job(ctx: Any, **kwargs: Any) -> None:  # pragma: no cover - never run here
        return None

    return app


async def _call(app: App, call: Call) -> tuple[Any, BaseException | None, str]:
    """Run ``call``; ``(result, error, CLI output)``."""
    out = io.StringIO()
    try:
        if call.name == "cli":
            console = Console(file=out, width=120, color_system=None)
            result: Any = await cli_run(list(call.args), app=app, console=console)
        elif call.name == "watch":
            watch = app.watch(*call.args, **call.kwargs)
            try:
                result = await anext(watch)
            finally:
                await cast("AsyncGenerator[Any, None]", watch).aclose()
        else:
            result = await getattr(app, call.name)(*call.args, **call.kwargs)
    except Exception as exc:
        return None, exc, out.getvalue()
    return result, None, out.getvalue()


def _sync_call(app: App, call: Call) -> BaseException | None:
    if call.name in ("cli", "watch"):
        return None
    try:
        getattr(app.sync, call.name)(*call.args, **call.kwargs)
    except Exception as exc:
        return exc
    return None


def _check_refusal(call: Call, error: BaseException) -> None:
    if isinstance(error, TypeError) and call.bad_authority:
        return
    why = (f"{call!r} raised {type(error).__name__}: {short(str(error))} — bad input must "
           "be refused with a named error of the tree (InvalidInput, TaskNotFound, …)")
    assert isinstance(error, TasksError), why
    assert not isinstance(error, StoreError), why


async def _check_success(world: World, call: Call, result: Any) -> None:
    assert not call.bad_authority, f"{call!r} succeeded without a valid authority"
    if call.name != "submit" or result.outcome != "created":
        return
    _, data, who = call.args
    stored = await world.app.get(result.id, System())
    assert data == stored.work.input, f"{call!r}: the input did not read back exactly"
    assert call.kwargs.get("idempotency_key") == stored.work.idempotency_key, (
        f"{call!r}: the idempotency key did not read back exactly")
    key = call.kwargs.get("key")
    if key is not None:
        owner = who if isinstance(who, Owner) else None
        dedup = call.kwargs.get("dedup", "owner")
        assert scoped_task_key(key, owner, dedup=dedup, tenant=who.tenant) == result.id
    world.ids.append(result.id)


async def check_call(world: World, call: Call) -> None:
    """Run ``call`` against the world and check the rules of :func:`run_client_fuzz`."""
    before = world.last if world.last is not None else await world.fingerprint()
    world.last = None
    result, error, output = await _call(world.app, call)
    assert not _CONTROL.search(output), f"{call!r} wrote a control character to the terminal"
    if error is None:
        await _check_success(world, call, result)
        return
    _check_refusal(call, error)
    assert before == await world.fingerprint(), f"{call!r} was refused but changed the store"
    if world.twin is None or call.name in ("cli", "watch"):
        return
    twin = await asyncio.to_thread(_sync_call, world.twin, call)
    if not isinstance(error, TaskTimeout) and not isinstance(twin, TaskTimeout):
        assert masked(error) == masked(twin), (
            f"app.sync.{call.name} failed otherwise than the async call: "
            f"{masked(twin)} != {masked(error)}"
        )
        assert before == await world.fingerprint(), f"sync {call!r} changed the store"


def run_client_fuzz(
    factory: StoreFactory,
    *,
    max_examples: int = 60,
    full_catalogue: bool = True,
    sync_twin: bool = True,
) -> None:
    """Hostile arguments to every client call and CLI command: first the
    :func:`catalogue` (every argument, one hostile value at a time), then
    ``max_examples`` random sequences of up to three calls with hostile combinations.
    ``sync_twin=False`` skips repeating refusals through ``app.sync`` (which opens the
    store on a second event loop: the sync facade is the same core code on every store).

    The store (``factory``) is opened under an ``App`` with a few tasks in it (pending,
    running, waiting for input, finished); the calls are ``submit``, ``get``, ``list``,
    ``history``, ``cancel``, ``respond``, ``wait``, ``watch``, ``release`` and the
    ``tasks`` CLI (``submit``, ``show``, ``cancel``, ``respond``, ``ls``). Every call must
    either

    - succeed — and then what it stored reads back exactly (input, key, idempotency key), or
    - raise a named error of the tree (a ``TasksError`` that is not a ``StoreError``: bad
      input is the caller's fault, never the store's), ``TypeError`` only for a missing or
      bare-string authority — and leave the store exactly as it was
      (:func:`~tasks_contract_tests.fuzz.store_fingerprint`). A refused call is repeated
      through ``app.sync`` and must fail there the same way.

    The CLI must return an exit code or raise such an error (what ``tasks`` prints as a
    one-line ``error:``), and never write a control character of stored or given text to
    the terminal.

    Raises:
        AssertionError: a call leaked a raw exception, wrote before refusing, or stored
            something that does not read back; Hypothesis notes the shrunk call.
    """
    loop = asyncio.new_event_loop()
    try:
        world = loop.run_until_complete(World.open(factory, sync_twin=sync_twin))
        try:
            for call in catalogue(world.ids[0], world.ids[1:], full=full_catalogue):
                loop.run_until_complete(check_call(world, call))
            @fuzz_settings(max_examples)
            @given(calls=st.lists(client_calls(list(world.ids), ["q", "k1", "g1"]),
                                  min_size=1, max_size=3))
            def example(calls: list[Call]) -> None:
                for call in calls:
                    loop.run_until_complete(check_call(world, call))

            example()
        finally:
            loop.run_until_complete(world.close())
    finally:
        loop.close()


# -- forged leases -----------------------------------------------------------------------


def _lease_ops(
    lease: Lease, task_id: str, revision: int
) -> dict[str, Callable[[TaskStore], Awaitable[Any]]]:
    """Every lease operation with ``lease``; transitions go to ``task_id`` (an existing
    task: a transition to a missing one is ``TaskNotFound`` by the protocol)."""
    events: dict[str, Event] = {
        "completed": Completed(event_id="forged-done", result={"forged": True}),
        "failed": Failed(event_id="forged-failed", error="Forged", message="forged"),
        "retry_requested": RetryRequested(event_id="forged-retry", error="Forged"),
        "input_requested": InputRequested(event_id="forged-ask", key="forged"),
    }
    ops: dict[str, Callable[[TaskStore], Awaitable[Any]]] = {
        "renew": lambda s: s.renew(lease, LEASE_S),
        "release": lambda s: s.release(lease),
        "report_progress": lambda s: s.report_progress(lease, 50.0, "forged"),
        "worker_snapshot": lambda s: s.worker_snapshot(lease),
    }
    for kind, event in events.items():
        ops[f"transition({kind})"] = (
            lambda s, e=event: s.transition(task_id, revision, e, lease)  # type: ignore[misc]
        )
    return ops


def run_lease_fuzz(factory: StoreFactory, *, max_examples: int = 60) -> None:
    """Forged leases (another token, task, generation or worker) against tasks held by
    real leases: ``renew``, ``release``, ``report_progress``, ``worker_snapshot`` and every
    worker event must raise ``LeaseLost`` and change nothing — the real lease included.

    Raises:
        AssertionError: a forged lease was accepted, or a refusal changed something.
    """
    loop = asyncio.new_event_loop()
    try:
        world = loop.run_until_complete(World.open(factory))
        try:
            held = {lease.task_id: lease for lease in world.leases}

            @fuzz_settings(max_examples)
            @given(
                real=st.sampled_from(world.leases),
                data=st.data(),
                op=st.sampled_from(sorted(_lease_ops(world.leases[0], "", 0))),
                target=st.sampled_from(["lease", "real"]),
            )
            def example(real: Lease, data: st.DataObject, op: str, target: str) -> None:
                forged = data.draw(forged_leases(real, world.ids), label="forged")

                async def attempt() -> None:
                    before = await world.fingerprint()
                    # Send transitions to the task the forged lease names, or to the task
                    # of the real lease it was forged from.
                    aimed = forged if target == "lease" else forged.model_copy(
                        update={"task_id": real.task_id})
                    aimed = aimed if aimed != held.get(aimed.task_id) else forged
                    snapshot = await world.store.get(real.task_id, tenant=None)
                    with contextlib.suppress(Exception):
                        snapshot = await world.store.get(aimed.task_id, tenant=None)
                    call = _lease_ops(aimed, snapshot.id, snapshot.revision)[op]
                    try:
                        await call(world.store)
                    except LeaseLost:
                        pass
                    except Exception as exc:
                        raise AssertionError(
                            f"{op} with a forged lease raised {type(exc).__name__} "
                            "instead of LeaseLost") from exc
                    else:
                        raise AssertionError(f"{op} accepted a forged lease: {aimed!r}")
                    assert before == await world.fingerprint(), (
                        f"{op} with a forged lease changed the store")

                loop.run_until_complete(attempt())

            example()
        finally:
            loop.run_until_complete(world.close())
    finally:
        loop.close()
