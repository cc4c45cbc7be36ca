"""Hostile client calls: the ``Call`` record, Hypothesis strategies building calls with
hostile arguments, and the deterministic :func:`catalogue` (every argument of every call,
one hostile value at a time). Used by :mod:`tasks_contract_tests.bad_input`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from tasks_core import Owner, System

from tasks_contract_tests.fuzz import (
    hostile_texts,
    ids_like,
    not_json,
    not_strings,
    odd_json,
    printable_texts,
)

__all__ = [
    "ALICE",
    "AUTHORITIES",
    "BOB",
    "LEASE_S",
    "MALLORY",
    "NASTY",
    "Call",
    "catalogue",
    "client_calls",
    "fuzz_settings",
    "short",
]

ALICE = Owner("alice")
BOB = Owner("bob")
MALLORY = Owner("mallory", tenant="evil")
AUTHORITIES: tuple[Owner | System, ...] = (ALICE, BOB, MALLORY, System(), System("evil"))
LEASE_S = 30.0
WAIT_S = 0.2
"""``wait`` timeout: a refusal comes at once; a live task times out (``TaskTimeout``)."""
NASTY = "boom \x1b[2J\x1b]52;c;cHduZWQ=\x07 [/] [link=https://evil.example]x \u202e"
"""Stored text (an error and a progress message) that must reach the terminal inert."""


def fuzz_settings(
    max_examples: int, *, steps: int = 50, derandomize: bool = True,
    shrink: bool = True,
) -> settings:
    """Bounded, database-free settings for the suite's Hypothesis runs (deterministic
    unless ``derandomize=False``; ``steps``: the length of a stateful program)."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=derandomize,
        database=None,
        print_blob=False,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate, Phase.shrink)[: 3 if shrink else 2],
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
        args = ", ".join([*(short(a) for a in self.args),
                          *(f"{k}={short(v)}" for k, v in self.kwargs.items())])
        return f"{self.name}({args})"


def short(value: Any) -> str:
    """``repr(value)``, at most 60 characters (values holding huge integers included)."""
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
