"""Bad input through every client call, the sync facade and the CLI; forged leases.

:func:`run_client_fuzz` opens the implementer's store (``factory``) under an ``App``, puts a
few tasks in it (pending, running, waiting for input, finished) and lets Hypothesis call
``submit``, ``get``, ``list``, ``history``, ``cancel``, ``respond``, ``wait``, ``watch``,
``release`` and the ``tasks`` CLI (``submit``, ``show``, ``cancel``, ``respond``, ``ls``)
with hostile arguments (see :mod:`tasks_contract_tests.fuzz`). Every call must either

- succeed — and then what it stored reads back exactly (input, key, idempotency key), or
- raise a named error of the tree (a ``TasksError`` that is not a ``StoreError``: bad input
  is the caller's fault, never the store's), ``TypeError`` only for a missing or bare-string
  authority — and leave the store exactly as it was (:func:`~tasks_contract_tests.fuzz.
  store_fingerprint`). A refused call is repeated through ``app.sync`` and must fail there
  the same way.

The CLI must return an exit code or raise such an error (what ``tasks`` prints as a
one-line ``error:``), and never write a control character of stored or given text to the
terminal.

:func:`run_lease_fuzz` forges leases (another token, task, generation or worker) against a
task held by a real lease: ``renew``, ``release``, ``report_progress``,
``worker_snapshot`` and every worker event must raise ``LeaseLost`` and change nothing —
the real lease included.

Both run on a loop of their own (call them from a thread, or from a sync test), are
deterministic (``derandomize``) and keep nothing in a Hypothesis database.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from hypothesis import HealthCheck, Phase, given, settings
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

from tasks_contract_tests.fuzz import (
    forged_leases,
    hostile_texts,
    ids_like,
    masked,
    not_json,
    not_strings,
    odd_json,
    printable_texts,
    store_fingerprint,
)

__all__ = ["Call", "StoreFactory", "catalogue", "check_call", "run_client_fuzz",
           "run_lease_fuzz"]

StoreFactory = Callable[..., Awaitable[TaskStore]]

ALICE = Owner("alice")
BOB = Owner("bob")
MALLORY = Owner("mallory", tenant="evil")
AUTHORITIES: tuple[Owner | System, ...] = (ALICE, BOB, MALLORY, System(), System("evil"))
LEASE_S = 30.0
WAIT_S = 0.2
"""``wait`` timeout: a refusal comes at once; a live task times out (``TaskTimeout``)."""
NASTY = "boom \x1b[2J\x1b]52;c;cHduZWQ=\x07 [/] [link=https://evil.example]x \u202e"
"""Stored text (an error and a progress message) that must reach the terminal inert."""
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def fuzz_settings(max_examples: int) -> settings:
    """Deterministic, bounded, database-free settings for these runs."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=False,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
    )


# -- calls -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One client call: ``App.<name>(*args, **kwargs)``, or the CLI (``name="cli"``)."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    bad_authority: bool = False

    def __repr__(self) -> str:
        args = ", ".join([*(_short(a) for a in self.args),
                          *(f"{k}={_short(v)}" for k, v in self.kwargs.items())])
        return f"{self.name}({args})"


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # holds an integer too long to print
        text = f"<{type(value).__name__} holding a huge integer>"
    return text if len(text) <= 60 else text[:57] + "..."


def _authorities() -> st.SearchStrategy[tuple[Any, bool]]:
    good = st.sampled_from(AUTHORITIES).map(lambda a: (a, False))
    bad = st.one_of(st.sampled_from(["alice", "system", ""]), st.none(),
                    st.just({"user_id": "alice"})).map(lambda a: (a, True))
    return st.one_of(good, good, good, bad)


def _answers(keys: Sequence[str]) -> st.SearchStrategy[Any]:
    good_keys = st.sampled_from(list(keys))
    return st.one_of(
        st.dictionaries(good_keys, odd_json(), min_size=1, max_size=2),
        st.dictionaries(hostile_texts(), st.just(True), min_size=1, max_size=2),
        not_json(),
        st.just({}),
        st.sampled_from([[("q", 1)], "q=1", None]),
        st.integers(1, 3).map(lambda n: {"q": "x" * (n * 100_000)}),
    )


def _submit_calls(keys: Sequence[str]) -> st.SearchStrategy[Call]:
    options = st.fixed_dictionaries(
        {},
        optional={
            "key": st.one_of(st.sampled_from(list(keys)), printable_texts(), hostile_texts(),
                             not_strings()),
            "dedup": st.sampled_from(["owner", "global", "tenant", "", None]),
            "watchers": st.one_of(st.just([BOB]), st.just([MALLORY]), st.just("bob"),
                                  st.just([None]), st.just([ALICE, ALICE])),
            "queue": st.one_of(st.sampled_from(["default", "other"]), hostile_texts(),
                               not_strings()),
            "ttl": st.one_of(st.floats(), st.integers(-5, 10**12), st.just("1")),
            "retention": st.one_of(st.floats(), st.integers(-5, 10**12)),
            "timeout": st.one_of(st.floats(), st.integers(-5, 10**12)),
            "max_deliveries": st.one_of(st.integers(-5, 10**9), st.floats(), st.just("3")),
            "idempotency_key": st.one_of(hostile_texts(), not_strings()),
            "retry": st.one_of(st.none(), st.just("fixed"), st.just(3)),
        },
    )
    inputs = st.one_of(st.none(), odd_json(), not_json(), hostile_texts(), st.just([1, 2]),
                       st.integers(1, 2).map(lambda n: {"big": "x" * (n * 200_000)}))
    names = st.one_of(st.just("job"), hostile_texts(), not_strings())
    return st.builds(
        lambda name, data, who, kw: Call("submit", (name, data, who[0]), kw, who[1]),
        names, inputs, _authorities(), options,
    )


def _read_calls(ids: st.SearchStrategy[Any], keys: Sequence[str]) -> st.SearchStrategy[Call]:
    def one(name: str, task_id: Any, who: tuple[Any, bool], answers: Any) -> Call:
        if name == "respond":
            return Call(name, (task_id, answers, who[0]), {}, who[1])
        if name == "wait":
            return Call(name, (task_id, who[0]), {"timeout": WAIT_S}, who[1])
        return Call(name, (task_id, who[0]), {}, who[1])

    return st.builds(
        one,
        st.sampled_from(["get", "history", "cancel", "respond", "release", "wait", "watch"]),
        ids, _authorities(), _answers(keys),
    )


def _list_calls(ids: st.SearchStrategy[Any]) -> st.SearchStrategy[Call]:
    options = st.fixed_dictionaries(
        {},
        optional={
            "status": st.one_of(st.sampled_from(["pending", "running", "done", 5]),
                                st.just(["pending", "failed"]), st.just({"$ne": None}),
                                hostile_texts()),
            "queue": st.one_of(st.just("default"), hostile_texts(), not_strings()),
            "after": ids,
            "limit": st.one_of(st.integers(-2, 1002), st.sampled_from([1.5, "5", True, None])),
        },
    )
    return st.builds(lambda who, kw: Call("list", (who[0],), kw, who[1]),
                     _authorities(), options)


def _cli_calls(ids: st.SearchStrategy[Any], keys: Sequence[str]) -> st.SearchStrategy[Call]:
    texts = st.one_of(hostile_texts(), printable_texts())
    who = st.one_of(
        st.just(["--system"]),
        texts.map(lambda t: ["--system", f"--tenant={t}"]),
        texts.map(lambda u: [f"--user={u}"]),
        st.tuples(texts, texts).map(lambda p: [f"--user={p[0]}", f"--tenant={p[1]}"]),
        st.just(["--user=alice"]),
    )
    json_texts = st.one_of(
        st.sampled_from(["NaN", "[1]", "{\"a\": Infinity}", "{\"a\": 1e999}", "{", "null",
                         "[" * 5000, "{\"a\": " + "1" * 5000 + "}", "\"\\ud800\"",
                         "{\"a\": \"\\u0000\\u001b[2J\"}", "{\"" + "k" * 10 + "\": 1}"]),
        texts,
    )
    str_ids = ids.filter(lambda i: isinstance(i, str))

    def argv(command: str, task_id: str, person: list[str], extra: list[str]) -> Call:
        if command in ("show", "cancel"):
            line = [command, *person, "--", task_id]
        elif command == "respond":
            line = [command, *person, "--", task_id, *extra]
        elif command == "ls":
            line = [command, *person, *extra]
        else:
            line = [command, "job", *person, *extra]
        return Call("cli", tuple(line))

    respond_extra = st.lists(
        st.tuples(st.one_of(st.sampled_from(list(keys)), texts), json_texts)
        .map(lambda kv: f"{kv[0]}={kv[1]}"), min_size=1, max_size=2)
    ls_extra = st.lists(st.one_of(
        st.sampled_from(["--status=pending", "--status=failed", "--wide"]),
        str_ids.map(lambda i: f"--after={i}"),
        st.integers(-1, 1001).map(lambda n: f"--limit={n}"),
        texts.map(lambda q: f"--queue={q}"),
    ), max_size=3)
    submit_extra = st.lists(st.one_of(
        json_texts.map(lambda j: f"--input={j}"),
        texts.map(lambda k: f"--key={k}"),
        st.just("--global"),
        texts.map(lambda q: f"--queue={q}"),
    ), max_size=3)
    return st.one_of(
        st.builds(argv, st.sampled_from(["show", "cancel"]), str_ids, who, st.just([])),
        st.builds(argv, st.just("respond"), str_ids, who, respond_extra),
        st.builds(argv, st.just("ls"), st.just(""), who, ls_extra),
        st.builds(argv, st.just("submit"), st.just(""), who, submit_extra),
    )


def client_calls(known_ids: Sequence[str], keys: Sequence[str]) -> st.SearchStrategy[Call]:
    """Every client call (and CLI command) with hostile arguments."""
    ids = ids_like(known_ids)
    return st.one_of(_submit_calls(keys), _read_calls(ids, keys), _list_calls(ids),
                     _cli_calls(ids, keys))


# -- the catalogue: every argument of every call, one hostile value at a time -----------

BAD_TEXTS: tuple[str, ...] = (
    "", "::", "a:", "a\x00b", "\ud800", "x" * 1025, "\u00e9" * 300, "\u202e", "\x1b[2J",
    "[/]", "'; DROP TABLE tasks; --", "$ne", "a\nb",
)
"""Strings every string argument is tried with (some are valid somewhere, e.g. ``[/]``)."""
BAD_OBJECTS: tuple[Any, ...] = (None, 5, b"x", {"$ne": None}, ["a"])
"""Non-strings every string argument is tried with."""
BAD_NUMBERS: tuple[Any, ...] = (math.nan, math.inf, -1, 0, "1", 10**12, True)
"""What every numeric option is tried with."""


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


BAD_JSON: tuple[Any, ...] = (
    {"x": math.nan}, {"x": -math.inf}, {1: 2}, {"x": (1, 2)}, {"\ud800": 1}, {"x": "\udcff"},
    {"x": _deep(70)}, {"x": 2**8193}, {"x": -(10**5000)}, {"x": object()}, [1, 2], "text",
    {"x": "y" * 300_000},
)
"""Payloads every JSON argument is tried with."""
BAD_AUTHORITIES: tuple[Any, ...] = ("alice", None, {"user_id": "alice"})
BAD_JSON_TEXTS: tuple[str, ...] = (
    "NaN", "[1]", '{"a": Infinity}', '{"a": 1e999}', "{", "[" * 5000 + "]" * 5000,
    '{"a": ' + "1" * 5000 + "}", '{"a": "\\ud800"}', '{"a": "\\u0000\\u001b[2J"}',
)
"""What the CLI's JSON arguments (``--input``, answers) are tried with."""


def catalogue(task_id: str, shown: Sequence[str] = (), *, full: bool = True) -> list[Call]:
    """Every argument of every client call and CLI command, each with every value of the
    ``BAD_*`` tables while the other arguments are valid (``full=False``: a third of the
    values, for slow stores); and ``tasks show``/``tasks ls`` of the tasks ``shown``."""
    texts: tuple[Any, ...] = BAD_TEXTS + BAD_OBJECTS
    numbers, payloads = BAD_NUMBERS, BAD_JSON
    if not full:
        texts, numbers, payloads = texts[::3], numbers[::3], payloads[::3]
    calls: list[Call] = []
    for who in BAD_AUTHORITIES:
        calls.append(Call("submit", ("job", None, who), {}, True))
        calls.append(Call("list", (who,), {}, True))
        for name in ("get", "history", "cancel", "release", "watch"):
            calls.append(Call(name, (task_id, who), {}, True))
        calls.append(Call("respond", (task_id, {"q": 1}, who), {}, True))
    for text in texts:
        calls.append(Call("submit", (text, None, ALICE)))
        for option in ("key", "queue", "idempotency_key", "dedup"):
            calls.append(Call("submit", ("job", None, ALICE), {option: text}))
        for name in ("get", "history", "cancel", "watch"):
            calls.append(Call(name, (text, ALICE)))
        calls.append(Call("release", (text, System())))
        calls.append(Call("wait", (text, ALICE), {"timeout": WAIT_S}))
        calls.append(Call("respond", (text, {"q": 1}, ALICE)))
        if isinstance(text, str) and text:
            calls.append(Call("respond", (task_id, {text: 1}, ALICE)))
        for option in ("status", "queue", "after"):
            calls.append(Call("list", (ALICE,), {option: text}))
        if isinstance(text, str):
            calls += _cli_catalogue(task_id, text)
    for number in numbers:
        for option in ("ttl", "retention", "timeout", "max_deliveries"):
            calls.append(Call("submit", ("job", None, ALICE), {option: number}))
        calls.append(Call("list", (ALICE,), {"limit": number}))
    for payload in payloads:
        calls.append(Call("submit", ("job", payload, ALICE)))
        calls.append(Call("respond", (task_id, payload, ALICE)))
        calls.append(Call("respond", (task_id, {"q": payload}, ALICE)))
    for watchers in ("bob", [None], [MALLORY], [ALICE, ALICE], [System()]):
        calls.append(Call("submit", ("job", None, ALICE), {"watchers": watchers}))
    calls.append(Call("submit", ("job", None, ALICE), {"retry": "fixed"}))
    for text in BAD_JSON_TEXTS:
        calls.append(Call("cli", ("submit", "job", "--user=alice", f"--input={text}")))
        calls.append(Call("cli", ("respond", "--user=alice", "--", task_id, f"q={text}")))
    for shown_id in shown:
        calls.append(Call("cli", ("show", "--system", "--", shown_id)))
    calls.append(Call("cli", ("ls", "--system", "--wide")))
    calls.append(Call("cli", ("ls", "--system", "--limit=1")))
    return calls


def _cli_catalogue(task_id: str, text: str) -> list[Call]:
    who = ["--user=alice"]
    lines = [
        ["show", *who, "--", text],
        ["cancel", *who, "--", text],
        ["respond", *who, "--", text, "q=1"],
        ["respond", *who, "--", task_id, f"{text}=1", f"q={text}"],
        ["ls", *who, f"--after={text}"],
        ["ls", *who, f"--queue={text}"],
        ["ls", f"--user={text}"],
        ["ls", "--system", f"--tenant={text}"],
        ["submit", "job", *who, f"--key={text}"],
        ["submit", "job", *who, f"--input={text}"],
        ["submit", "job", *who, f"--queue={text}"],
        ["submit", text, *who],
    ]
    return [Call("cli", tuple(line)) for line in lines]


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
    why = (f"{call!r} raised {type(error).__name__}: {_short(str(error))} — bad input must "
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
    """Run ``call`` against the world and check the rules in the module docstring."""
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
    """Hostile arguments to every client call and CLI command (module docstring): first
    the :func:`catalogue` (every argument, one hostile value at a time), then
    ``max_examples`` random sequences of up to three calls with hostile combinations.
    ``sync_twin=False`` skips repeating refusals through ``app.sync`` (which opens the
    store on a second event loop: the sync facade is the same core code on every store).

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
    """Forged leases against held tasks (module docstring).

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
