"""Tenant isolation under property testing: outsiders learn and change nothing.

:func:`run_isolation_check` gives tenant ``acme`` tasks in every state, with secrets in
them, and lets Hypothesis play client calls by outsiders aimed at ids guessed from acme's.
After every sequence acme's tasks are exactly as before, an outsider's answer about an
existing acme task is indistinguishable from one about a never-existing id, listings show
outsiders only their own tenant's tasks, and no error quotes acme's secrets. One exception
is inherent and documented (``docs/security.md``): a non-member of the same tenant learns
that a global key is taken.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from hypothesis import given
from hypothesis import strategies as st
from tasks_core import (
    App,
    Completed,
    Failed,
    InputRequested,
    Lease,
    ManualClock,
    Owner,
    Policy,
    System,
    TaskStore,
)
from tasks_core.authority import Authority, scoped_task_key

from tasks_contract_tests._calls import fuzz_settings
from tasks_contract_tests.fuzz import id_variants, masked, store_fingerprint

__all__ = ["StoreFactory", "run_isolation_check"]

StoreFactory = Callable[..., Awaitable[TaskStore]]

TENANT = "acme"
ALICE = Owner("alice", tenant=TENANT)
CAROL = Owner("carol", tenant=TENANT)
BOB = Owner("bob", tenant=TENANT)
SECRETS = ("input-secret-7f3a", "result-secret-91c2", "error-secret-44d0")
KEYS = ("k1", "k2", "k3", "k4", "g1", "sys")
LEASE_S = 3600.0


@dataclass(frozen=True)
class Probe:
    """One call by an outsider."""

    actor: Authority
    op: str
    target: str
    key: str = "k1"
    dedup: Literal["owner", "global"] = "owner"
    after: str | None = None
    status: str | None = None

    def __repr__(self) -> str:
        return f"{self.op}({self.target!r}) by {self.actor}"


@dataclass
class Acme:
    """The store, the app and acme's tasks."""

    store: TaskStore
    app: App
    ids: list[str]
    lease: Lease
    outsiders: list[Authority]

    @classmethod
    async def open(
        cls, factory: StoreFactory, visibility: Literal["watchers", "tenant"]
    ) -> Acme:
        """Open the store and give acme (and each outsider) its tasks."""
        store = await factory(clock=ManualClock())
        app = App(store=store, policy=Policy(visibility=visibility))

        @app.task
        async def job(ctx: Any, **kwargs: Any) -> None:  # pragma: no cover - never run here
            return None

        await app.open()
        pending = await app.submit("job", {"token": SECRETS[0]}, ALICE, key="k1")
        waiting = await app.submit("job", None, ALICE, key="k2", watchers=[CAROL])
        done = await app.submit("job", None, ALICE, key="k3")
        failed = await app.submit("job", None, ALICE, key="k4")
        shared = await app.submit("job", None, ALICE, key="g1", dedup="global")
        system = await app.submit("job", None, System(TENANT), key="sys", dedup="global")
        anonymous = await app.submit("job", {"token": SECRETS[0]}, ALICE)
        held = await store.claim(waiting.id, "w1", LEASE_S)
        await store.transition(waiting.id, 0, InputRequested(event_id="ask", key="q",
                                                             request={"s": SECRETS[0]}),
                               held.lease)
        finished = await store.claim(done.id, "w1", LEASE_S)
        await store.transition(done.id, 0, Completed(event_id="done",
                                                     result={"s": SECRETS[1]}),
                               finished.lease)
        broken = await store.claim(failed.id, "w1", LEASE_S)
        await store.transition(failed.id, 0, Failed(event_id="f", error="Boom",
                                                    message=SECRETS[2]), broken.lease)
        outsiders: list[Authority] = [
            Owner("mallory", tenant="evil"),
            Owner("alice", tenant="evil"),
            System("evil"),
            Owner("alice"),
        ]
        if visibility == "watchers":
            outsiders.append(BOB)
        for number, actor in enumerate(outsiders):  # each has a task of its own to see
            await app.submit("job", None, actor, key=f"own-{number}", dedup="global")
        ids = [pending.id, waiting.id, done.id, failed.id, shared.id, system.id, anonymous.id]
        return cls(store, app, ids, held.lease, outsiders)

    async def fingerprint(self) -> Any:
        """acme's tasks, their histories, and whether acme's held lease still holds."""
        return await store_fingerprint(self.store, ids=self.ids, leases=[self.lease])


def guessed_ids(acme: Acme) -> list[str]:
    """Ids an outsider might try: acme's own, variants of them, and acme's keys in other
    scopes."""
    guesses = set(acme.ids)
    for task_id in acme.ids:
        guesses.update(v for v in id_variants(task_id) if v.isprintable())
    for key in KEYS:
        guesses.update({key, f"{TENANT}::{key}", f"{TENANT}::::{key}", f"alice::{key}",
                        f"{TENANT}::alice::{key}", f"evil::alice::{key}"})
    return sorted(g for g in guesses if g and len(g.encode()) <= 1024)


def probes(acme: Acme) -> st.SearchStrategy[Probe]:
    """Calls by outsiders aimed at guessed ids."""
    targets = st.one_of(st.sampled_from(acme.ids), st.sampled_from(guessed_ids(acme)))
    return st.builds(
        Probe,
        actor=st.sampled_from(acme.outsiders),
        op=st.sampled_from(["get", "history", "cancel", "respond", "release", "wait", "watch",
                            "list", "submit"]),
        target=targets,
        key=st.sampled_from(KEYS),
        dedup=st.sampled_from(["owner", "global"]),
        after=st.none() | targets,
        status=st.sampled_from([None, "pending", "waiting_input", "completed", "failed"]),
    )


async def _attempt(app: App, probe: Probe, target: str) -> tuple[Any, BaseException | None]:
    actor = probe.actor
    try:
        if probe.op == "respond":
            result: Any = await app.respond(target, {"q": {"ok": True}}, actor)
        elif probe.op == "wait":
            result = await app.wait(target, actor, timeout=5.0)
        elif probe.op == "watch":
            watch = app.watch(target, actor)
            try:
                result = await anext(watch)
            finally:
                await cast("AsyncGenerator[Any, None]", watch).aclose()
        elif probe.op == "release":
            await app.release(target, actor)
            result = None
        elif probe.op in ("get", "history", "cancel"):
            result = await getattr(app, probe.op)(target, actor)
        else:  # pragma: no cover - list and submit are handled by the caller
            raise AssertionError(probe.op)
    except Exception as exc:
        return None, exc
    return result, None


def _no_secrets(what: str, value: object) -> None:
    text = repr(value) + str(value)
    for secret in SECRETS:
        assert secret not in text, f"{what} quotes acme's data"


async def _list_all(app: App, actor: Authority, status: str | None) -> list[str]:
    ids: list[str] = []
    after: str | None = None
    while True:
        page = await app.list(actor, status=status, after=after, limit=1000)
        ids += [s.id for s in page]
        if page.next_after is None:
            return ids
        after = page.next_after


async def check_probe(acme: Acme, probe: Probe, ghosts: dict[str, str]) -> None:
    """One outsider call against the rules of :func:`run_isolation_check`."""
    app, actor = acme.app, probe.actor
    if probe.op == "list":
        page = await app.list(actor, status=probe.status, after=probe.after, limit=3)
        everything = await _list_all(app, actor, probe.status)
        expected = [i for i in everything if probe.after is None or i > probe.after][:3]
        assert expected == [s.id for s in page], f"{probe!r}: the page is not a plain cut"
        for snapshot in page:
            assert snapshot.id not in acme.ids, f"{probe!r} listed acme's task"
            assert snapshot.tenant != TENANT or actor == BOB, f"{probe!r} crossed tenants"
        assert page.next_after not in acme.ids
        return
    if probe.op == "submit":
        owner = actor if isinstance(actor, Owner) else None
        try:
            aimed = scoped_task_key(probe.key, owner, dedup=probe.dedup, tenant=actor.tenant)
        except Exception:
            aimed = None
        try:
            result = await app.submit("job", None, actor, key=probe.key, dedup=probe.dedup)
        except Exception as exc:
            _no_secrets(f"{probe!r}", exc)
            return
        assert aimed == result.id, f"{probe!r} created {result.id!r}"
        assert result.id not in acme.ids, f"{probe!r} joined or replaced acme's task"
        return
    if probe.target not in acme.ids:
        if probe.op != "wait":  # an outsider's own live task would make it wait
            _no_secrets(f"{probe!r}", (await _attempt(app, probe, probe.target))[1])
        return
    result, error = await _attempt(app, probe, probe.target)
    _no_secrets(f"{probe!r}", error)
    assert error is not None, f"{probe!r} reached acme's task: {result!r}"
    ghost = ghosts.setdefault(probe.target, f"{probe.target}-ghost-{len(ghosts)}")
    _, twin = await _attempt(app, probe, ghost)
    assert masked(error, probe.target) == masked(twin, ghost), (
        f"{probe!r}: an existing task answers {masked(error, probe.target)}, a missing one "
        f"{masked(twin, ghost)} — an existence oracle"
    )


def run_isolation_check(
    factory: StoreFactory,
    *,
    max_examples: int = 40,
    visibility: Literal["watchers", "tenant"] = "watchers",
) -> None:
    """Run the tenant-isolation property.

    The store (``factory``) is opened under an ``App`` and tenant ``acme`` gets tasks in
    every state (pending, waiting for input under a held lease, completed, failed, global
    keys, a random id), with secrets in their input, result and error. Hypothesis then
    plays sequences of client calls by outsiders — principals of tenant ``evil`` (an owner,
    a user called ``alice`` there too, ``System("evil")``), an ``alice`` of the default
    tenant and, under ``visibility="watchers"``, ``bob`` of ``acme`` who is not a member —
    aimed at ids guessed from acme's real ids, keys and prefixes. After every sequence:

    - acme's tasks, histories and held lease are exactly as before
      (:func:`~tasks_contract_tests.fuzz.store_fingerprint`);
    - every answer an outsider got about an existing acme task is indistinguishable from
      the answer about a never-existing id: the same error type and the same message once
      the id is masked (:func:`~tasks_contract_tests.fuzz.masked`) — no existence oracle;
    - listings show outsiders only their own tenant's tasks, and a page cursor (``after``)
      behaves as a plain bound: the page equals the outsider's full listing cut at it;
    - no error message ever quotes acme's secrets.

    The inherent exception (``docs/security.md``): a *global* key is one name per tenant,
    so a non-member of the same tenant submitting acme's global key learns that it is
    taken (``AuthorizationError``); that submit is still checked to change nothing.

    Args:
        factory: ``async factory(**options) -> TaskStore`` (called with ``clock=``) on
            this function's own event loop.
        max_examples: how many random sequences (of up to 6 calls) to play.
        visibility: the policy's visibility.

    Raises:
        AssertionError: an outsider changed or learned something; Hypothesis notes the
            shrunk sequence.
    """
    loop = asyncio.new_event_loop()
    try:
        acme = loop.run_until_complete(Acme.open(factory, visibility))
        ghosts: dict[str, str] = {}
        try:
            @fuzz_settings(max_examples)
            @given(sequence=st.lists(probes(acme), min_size=1, max_size=6))
            def example(sequence: Sequence[Probe]) -> None:
                async def play() -> None:
                    before = await acme.fingerprint()
                    for probe in sequence:
                        await check_probe(acme, probe, ghosts)
                    assert before == await acme.fingerprint(), (
                        "outsiders changed acme's tasks")

                loop.run_until_complete(play())

            example()
        finally:
            loop.run_until_complete(acme.store.aclose())
    finally:
        loop.close()
