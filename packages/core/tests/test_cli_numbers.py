"""Every numeric option of ``tasks`` is checked once, by the one check of its kind (a size
by ``rules.check_limit``, a duration by ``durations.check_duration``), before anything is
read, written or started: ``0``, a negative, NaN, an infinity, ``1e308`` and a value over
its bound are each an ``InvalidInput`` naming the option (one line, exit 2 from the
console script). ``ls --scan N`` reads at most N tasks. A refusal shows the value as
given, never rounded into its bound."""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _runtime_kit import ALICE, TIMEOUT, DelegatingStore, make_app
from rich.console import Console
from tasks_core import App, InvalidInput, ManualClock, System, TaskStore
from tasks_core.cli import _dashboard, _reads, build_parser, run
from tasks_core.cli._options import MAX_PAGE, MAX_PORT, MAX_PROCESSES, MAX_ROUNDS, MAX_SCAN
from tasks_core.durations import MAX_WAIT_S, MIN_INTERVAL_S, check_duration
from tasks_core.errors import CapabilityNotSupported
from tasks_core.rules import MAX_LEASE_S, check_limit
from tasks_core.storekit import MAX_RUNNING
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio

NOT_NUMBERS = ["nan", "inf", "-inf", "1e308"]
"""What no size or duration of the CLI takes, besides its own out-of-range values."""


class CountingStore(DelegatingStore):
    """Counts the store's reads (``list``, ``get``, ``now``) and the tasks ``list``
    returns."""

    def __init__(self, inner: TaskStore) -> None:
        super().__init__(inner)
        self.reads = 0
        self.listed = 0

    async def list(self, query: Any) -> Any:
        self.reads += 1
        items = await self.inner.list(query)
        self.listed += len(items)
        return items

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return await self.inner.get(*args, **kwargs)

    async def now(self) -> Any:
        self.reads += 1
        return await self.inner.now()


def _counted() -> tuple[App, CountingStore]:
    store = CountingStore(MemoryStore(clock=ManualClock()))
    return make_app(store=store), store


async def _cli(app: App, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = await run(list(argv), app=app, console=Console(file=out, width=200,
                                                          color_system=None))
    return code, out.getvalue()


async def _refused(app: App, what: str, *argv: str) -> str:
    """Run ``tasks *argv``: it MUST raise ``InvalidInput`` naming ``what``; its message."""
    with pytest.raises(InvalidInput) as info:
        await _cli(app, *argv)
    assert what in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("value", [*NOT_NUMBERS, "99999999999", "0", "-5",
                                   str(MIN_INTERVAL_S / 10), str(MAX_LEASE_S + 1)])
async def test_workers_refuses_a_lease_a_worker_would_refuse(value: str) -> None:
    """``tasks workers --lease`` crashed on NaN, infinities and 1e308 (a traceback), and
    showed a heartbeat "28s ahead" for 0 or -5. It MUST be checked as ``Worker(lease_for=…)``
    is — at least ``MIN_INTERVAL_S``, at most ``MAX_LEASE_S`` — and refused (naming
    ``--lease`` and its bounds) before anything is read."""
    app, store = _counted()
    async with app:
        message = await _refused(app, "--lease", "workers", "--system", f"--lease={value}")
        assert f"[{MIN_INTERVAL_S:g}, {MAX_LEASE_S}]" in message
        assert 0 == store.reads


@pytest.mark.parametrize("value", [str(MIN_INTERVAL_S), str(MAX_LEASE_S)])
async def test_workers_takes_the_bounds_of_a_worker_lease(value: str) -> None:
    """The bounds themselves MUST be taken."""
    app = make_app()
    async with app:
        task = await app.submit("job", None, ALICE)
        await app.store.claim(task.id, "w1", 10)
        code, out = await _cli(app, "workers", "--system", "--lease", value)
    assert (0, True) == (code, "LAST HEARTBEAT" in out), out


@pytest.mark.parametrize(("option", "largest"), [("--limit", MAX_PAGE), ("--scan", MAX_SCAN)])
@pytest.mark.parametrize("value", [*NOT_NUMBERS, "0", "-1", "-5", "2.5", "over"])
async def test_ls_refuses_a_limit_or_scan_that_is_not_a_size(
    option: str, largest: int, value: str
) -> None:
    """``ls --limit -1`` showed every task but the last with a ``--after`` past a task
    never shown, ``--limit 0`` an empty table, ``--scan 0`` everything. Both MUST be
    integers from 1 to their bound, refused (naming the option and the value given)
    before anything is read."""
    given = str(largest + 1) if value == "over" else value
    app, store = _counted()
    async with app:
        await app.submit("job", None, ALICE)
        store.reads = 0
        message = await _refused(app, option, "ls", "--system", f"{option}={given}")
        assert f"1..{largest}" in message
        assert 0 == store.reads


async def test_ls_scan_reads_at_most_n_tasks_and_says_it_stopped() -> None:
    """``ls --scan N`` MUST read at most N tasks — asking the store for no more than
    what is left of N — list those, and say it read the first N; with N at least the
    number of matching tasks it MUST list them all and say nothing."""
    app, store = _counted()
    async with app:
        ids = [(await app.submit("job", None, ALICE)).id for _ in range(7)]
        store.listed = 0
        _, cut = await _cli(app, "ls", "--system", "--scan", "3")
        listed_cut, store.listed = store.listed, 0
        _, whole = await _cli(app, "ls", "--system", "--scan", "7")
    shown = [i for i in ids if i in cut]
    assert 3 == len(shown), cut
    assert listed_cut <= 3 + 1  # the three, and App.list's look one task further
    assert "read the first 3 matching tasks" in cut
    assert all(i in whole for i in ids)
    assert "read the first" not in whole


async def test_ls_scan_asks_for_pages_no_larger_than_what_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over several pages, each MUST ask for at most what is left of ``--scan``."""
    monkeypatch.setattr(_reads, "MAX_PAGE", 2)
    app = make_app()
    asked: list[int] = []
    listing = app.list

    async def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs["limit"])
        return await listing(*args, **kwargs)

    async with app:
        for _ in range(7):
            await app.submit("job", None, ALICE)
        monkeypatch.setattr(app, "list", spy)
        _, out = await _cli(app, "ls", "--system", "--scan", "5")
    assert [2, 2, 1] == asked
    assert "read the first 5 matching tasks" in out


@pytest.mark.parametrize("value", [*NOT_NUMBERS, "0", "-5", str(MAX_SCAN + 1)])
async def test_reap_refuses_a_bad_limit_before_the_store_is_opened(
    value: str, tmp_path: Path
) -> None:
    """``reap --limit 0`` was refused only by the store, after opening it (creating a
    SQLite file); NaN and 1e308 were argparse errors. Each MUST be ``InvalidInput``
    naming ``--limit``, with no file created."""
    pytest.importorskip("tasks_store_sql")
    url = f"sqlite:///{tmp_path / 't.db'}"
    with pytest.raises(InvalidInput, match="--limit"):
        await run(["reap", "--system", "--store", url, f"--limit={value}"],
                  console=Console(file=io.StringIO()))
    with pytest.raises(InvalidInput, match="limit"):
        await App(url).reap(System(), limit=0)
    assert [] == os.listdir(tmp_path)


@pytest.mark.parametrize(("option", "largest"), [
    ("--tasks", MAX_SCAN), ("--rounds", MAX_ROUNDS), ("--writers", MAX_PROCESSES),
    ("--workers", MAX_PROCESSES)])
@pytest.mark.parametrize("value", [*NOT_NUMBERS, "0", "-5", "over"])
async def test_stress_refuses_a_bad_size_before_it_starts(
    option: str, largest: int, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tasks stress --writers 99999999999`` started; NaN and 1e308 were argparse
    errors. Each size MUST be an integer from 1 to its bound, refused before the
    harness is even imported."""
    # A check after the import would meet CapabilityNotSupported instead.
    monkeypatch.setitem(sys.modules, "tasks_contract_tests.stress", None)
    given = str(largest + 1) if value == "over" else value
    with pytest.raises(InvalidInput, match=option):
        await run(["stress", "--store", "sqlite:///never.db", f"{option}={given}"],
                  console=Console(file=io.StringIO()))


async def test_stress_refuses_a_single_writer_as_its_help_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--writers`` races writers against each other: its help says 2..256, and the
    check MUST say so too (1 passed it and was refused later, by the harness)."""
    monkeypatch.setitem(sys.modules, "tasks_contract_tests.stress", None)
    with pytest.raises(InvalidInput, match=r"--writers must be an integer in 2\.\.256, not 1"):
        await run(["stress", "--store", "sqlite:///never.db", "--writers=1"],
                  console=Console(file=io.StringIO()))


def test_an_integer_past_the_digit_limit_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An integer of 5,000 digits MUST be a usage error saying so, not read as ``inf``
    (``not inf`` in the refusal)."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ls", "--system", "--limit", "9" * 5000])
    assert "an integer too long to read" in capsys.readouterr().err


@pytest.mark.parametrize("value", [*NOT_NUMBERS, "0", "-5", str(MAX_PORT + 1)])
async def test_dashboard_refuses_a_bad_port_before_it_serves(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dashboard --port -5`` ended in a traceback after opening the store. A port MUST
    be an integer from 1 to 65535, refused before anything is imported or opened."""

    def never(name: str) -> Any:
        raise CapabilityNotSupported("the check came too late")

    monkeypatch.setattr(_dashboard, "_import", never)
    monkeypatch.setenv(_dashboard.TOKEN_ENV, "a-long-enough-token")
    with pytest.raises(InvalidInput, match="--port"):
        await run(["dashboard", "--store", "memory://", f"--port={value}"],
                  console=Console(file=io.StringIO()))


@pytest.mark.parametrize(("option", "what", "values"), [
    ("--concurrency", "concurrency", [*NOT_NUMBERS, "0", "-5", "2.5", str(MAX_RUNNING + 1)]),
    ("--prefetch", "prefetch", [*NOT_NUMBERS, "-5", "2.5", "1001"]),
    ("--metrics-port", "--metrics-port must be an integer",
     [*NOT_NUMBERS, "-5", "65536", "2.5"]),
])
async def test_worker_refuses_a_bad_count_before_it_claims(
    option: str, what: str, values: list[str]
) -> None:
    """``tasks worker --concurrency 99999999999`` started; NaN, infinities and 1e308 of
    its integer options were argparse errors. Each MUST be ``InvalidInput`` naming the
    option, before anything is claimed."""
    app = make_app()
    async with app:
        task = await app.submit("job", None, ALICE)
        for value in values:
            await _refused(app, what, "worker", "m:app", "--no-reaper", f"{option}={value}")
        assert 0 == (await app.get(task.id, ALICE)).deliveries


async def test_an_integer_option_written_with_an_exponent_is_refused_as_a_float() -> None:
    """``--concurrency 1e3`` read "must be an integer in 1..1000000, not 1000.0", as if
    1000 were out of range: the refusal MUST say the value is a float."""
    app = make_app()
    async with app:
        message = await _refused(app, "concurrency", "worker", "m:app", "--no-reaper",
                                 "--concurrency=1e3")
    assert message.endswith("not the float 1000.0"), message


@pytest.mark.parametrize("value", [*NOT_NUMBERS, "101", "-101", "2.5"])
async def test_submit_refuses_a_bad_priority_before_it_writes(value: str) -> None:
    """``submit --priority nan`` was an argparse error; it MUST be ``InvalidInput``
    naming the priority, nothing written."""
    app = make_app()
    async with app:
        await _refused(app, "priority", "submit", "job", "--user", "alice",
                       f"--priority={value}")
        assert [] == (await app.list(System())).items


async def test_submit_many_refuses_priority_zero_like_any_other(tmp_path: Path) -> None:
    """``--many`` takes every option from its lines: ``--priority 0`` MUST be refused as
    ``--priority 5`` is, not silently dropped."""
    lines = tmp_path / "l.jsonl"
    lines.write_text('{"task": "job"}\n')
    app = make_app()
    async with app:
        await _refused(app, "--priority", "submit", "--many", str(lines), "--user", "alice",
                       "--priority", "0")
        assert [] == (await app.list(System())).items


@pytest.mark.parametrize(("argv", "what", "shown"), [
    (["worker", "m:app", "--input-park=31622401"], "input_park", "not '31622401'"),
    (["worker", "m:app", "--input-park=31622400.5"], "input_park", "not '31622400.5'"),
    (["worker", "m:app", "--reap-interval=31622401"], "reap_interval", "not '31622401'"),
    (["submit", "job", "--user", "alice", "--delay=367d"], "--delay", "not '367d'"),
    (["submit", "job", "--user", "alice", "--delay=31622401"], "--delay", "not '31622401'"),
    (["submit", "job", "--user", "alice", "--delay=400.5d"], "--delay", "not '400.5d'"),
    (["submit", "job", "--user", "alice", "--delay=-5s"], "--delay", "not '-5s'"),
    (["submit", "job", "--user", "alice", "--delay=-1.5m"], "--delay", "not '-1.5m'"),
    (["worker", "m:app", "--input-park=-1"], "input_park", "not '-1'"),
    (["ls", "--system", "--scan=100001"], "--scan", "not 100001"),
])
async def test_a_refusal_shows_the_value_as_given(
    argv: list[str], what: str, shown: str
) -> None:
    """A value just over its bound was printed rounded (``not 3.16224e+07`` against a
    bound of ``31622400``), so it read as the bound itself. The message MUST show the
    value as given, never rounded, and the bounds as written — a duration's text quoted as
    typed, not the seconds it reads as (test_cli_refusals); a negative duration is a
    number out of range, not an unreadable text."""
    app = make_app()
    async with app:
        message = await _refused(app, what, *argv)
    assert message.endswith(shown), message
    assert "e+" not in message


def test_the_checks_spell_the_value_exactly() -> None:
    """``check_duration`` and ``check_limit`` MUST show an int as digits and a float as
    its shortest exact spelling — NaN and the infinities too, and an integer too long to
    print described — the bounds readable (``0.001``, ``31622400``)."""
    app = make_app()
    with pytest.raises(InvalidInput) as info:
        app.periodic(every=MAX_WAIT_S + 1)(lambda ctx: None)
    assert str(info.value).endswith(f"not {MAX_WAIT_S + 1}")
    for value, shown in [(MAX_WAIT_S + 1, "31622401"), (MAX_WAIT_S + 0.5, "31622400.5"),
                         (1e308, "1e+308"), (MIN_INTERVAL_S / 2, "0.0005")]:
        with pytest.raises(InvalidInput) as info:
            check_duration(value, "x", low=MIN_INTERVAL_S, high=MAX_WAIT_S)
        assert f"x must be in [0.001, 31622400] seconds, not {shown}" == str(info.value)
    for value, shown in [(math.nan, "nan"), (-math.inf, "-inf"), (10**400, "1" + "0" * 400),
                         (10**5000, "an integer too long to print")]:
        with pytest.raises(InvalidInput) as info:
            check_duration(value, "x", low=MIN_INTERVAL_S, high=MAX_WAIT_S)
        assert (f"x must be a finite number of seconds in [0.001, 31622400], not {shown}"
                == str(info.value))
    for size, shown in [(0, "0"), (1001, "1001"), (2.5, "the float 2.5"), (10**5000, "an integer")]:
        with pytest.raises(InvalidInput) as info:
            check_limit(size, maximum=1000, what="--limit")  # type: ignore[arg-type]
        assert str(info.value).startswith(f"--limit must be an integer in 1..1000, not {shown}")


@pytest.mark.parametrize("argv", [
    ["workers", "--system", "--lease=nan"],
    ["workers", "--system", "--lease=1e308"],
    ["ls", "--system", "--limit=-1"],
    ["ls", "--system", "--scan=0"],
    ["reap", "--system", "--limit=inf"],
    ["submit", "job", "--user", "u", "--priority=nan"],
    ["worker", "numapp:app", "--concurrency=1e308"],
    ["dashboard", "--port=nan"],
    ["stress", "--writers=99999999999"],
])
def test_the_console_script_refuses_a_bad_number_on_one_line(
    argv: list[str], tmp_path: Path
) -> None:
    """From the console script each MUST exit 2 with one line ``error: InvalidInput: …``,
    no traceback, and no store file created."""
    pytest.importorskip("tasks_store_sql")
    (tmp_path / "numapp.py").write_text("from tasks_core import App\napp = App()\n")
    env = {k: v for k, v in os.environ.items() if k != "TASKS_STORE"}
    proc = subprocess.run(
        [sys.executable, "-m", "tasks_core.cli", *argv, "--store", "sqlite:///t.db"],
        capture_output=True, text=True, timeout=TIMEOUT * 6, cwd=tmp_path, env=env,
    )
    assert 2 == proc.returncode, proc.stderr
    assert 1 == len(proc.stderr.splitlines()), proc.stderr
    assert proc.stderr.startswith("error: InvalidInput: "), proc.stderr
    assert ["numapp.py"] == sorted(p.name for p in tmp_path.iterdir() if p.is_file())


class _BeatsWhileListed(DelegatingStore):
    """A worker's heartbeat lands while ``tasks workers`` lists: the clock moves a second
    and the lease of ``lease`` is renewed before the listing answers."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(MemoryStore(clock=clock))
        self.clock = clock
        self.lease: Any = None

    async def list(self, query: Any) -> Any:
        if self.lease is not None:
            self.clock.advance(1)
            await self.inner.renew(self.lease, 30)
        return await self.inner.list(query)


async def test_workers_never_shows_a_heartbeat_ahead_that_landed_while_it_listed() -> None:
    """A heartbeat written while ``tasks workers`` lists MUST read as just now, not "1s
    ahead": the store's now is read once the listing has answered."""
    clock = ManualClock()
    store = _BeatsWhileListed(clock)
    app = make_app(store=store)
    async with app:
        task = await app.submit("job", None, ALICE)
        store.lease = (await app.store.claim(task.id, "w1", 30)).lease
        _, out = await _cli(app, "workers", "--system", "--lease", "30")
    assert "(0s ago)" in out, out


async def test_workers_shows_a_heartbeat_in_the_past_with_a_good_lease() -> None:
    """With a lease it takes, the heartbeat MUST be expiry less the lease: never ahead."""
    clock = ManualClock()
    app = make_app(clock)
    async with app:
        task = await app.submit("job", None, ALICE)
        await app.store.claim(task.id, "w1", 30)
        clock.advance(2)
        _, out = await _cli(app, "workers", "--system", "--lease", "30")
    assert "(2s ago)" in out, out
