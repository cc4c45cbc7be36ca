"""The ``tasks`` program around its commands: the default store, the worker loader and its
settings, the console script's refusals, the demo, ``stress``, store URLs shown."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from _cli_kit import asking_app as _app
from _cli_kit import cli as _cli
from _cli_kit import console as _console
from _runtime_kit import ALICE, TIMEOUT, make_app
from tasks_core import (
    App,
    CapabilityNotSupported,
    InvalidInput,
    System,
    TaskContext,
    UnknownStore,
    find_store,
)
from tasks_core.cli import build_parser, load_app, run
from tasks_core.runtime._defaults import (
    EMBEDDED_STORE_URL,
    FALLBACK_STORE_URL,
    default_store_url,
    installed,
    require_default_store_url,
)
from tasks_core.runtime._worker_gc import YOUNG_THRESHOLD, tune_for_serving

pytestmark = pytest.mark.anyio


async def test_backends_says_there_is_no_default_store_when_none_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``tasks backends`` with neither default's plugin installed MUST head its table with
    "no" default — not name ``memory://``, which nothing serves."""
    import tasks_core.runtime._defaults as defaults

    def nothing_serves(url: str) -> object:
        raise UnknownStore(f"nothing serves {url}")

    monkeypatch.delenv("TASKS_STORE", raising=False)
    monkeypatch.setattr(defaults, "find_store", nothing_serves)
    _, listed = await _cli(App("memory://"), "backends")
    assert "default store: none — neither tasks-store-sql nor tasks-store-memory" in listed
    assert "memory://" not in listed.split("\n")[0]


async def test_default_store_prefers_sqlite_when_its_plugin_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default store MUST be ``$TASKS_STORE``, else SQLite when a plugin serves it,
    else memory."""
    monkeypatch.delenv("TASKS_STORE", raising=False)
    try:
        find_store("sqlite")
        expected = EMBEDDED_STORE_URL
    except Exception:
        expected = FALLBACK_STORE_URL
    assert expected == default_store_url()[0]
    monkeypatch.setenv("TASKS_STORE", "memory://elsewhere")
    assert ("memory://elsewhere", "from $TASKS_STORE") == default_store_url()


def test_without_a_store_plugin_the_default_store_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With neither tasks-store-sql nor tasks-store-memory installed, opening the default
    store MUST refuse with a message naming both distributions; with only the memory
    plugin the default MUST be ``memory://``."""
    import tasks_core.runtime._defaults as defaults

    monkeypatch.delenv("TASKS_STORE", raising=False)
    served: set[str] = set()

    def fake_find_store(url: str) -> object:
        if url not in served:
            raise UnknownStore(f"nothing serves {url}")
        return object()

    monkeypatch.setattr(defaults, "find_store", fake_find_store)
    with pytest.raises(UnknownStore) as info:
        require_default_store_url()
    assert "tasks-store-sql" in str(info.value)
    assert "tasks-store-memory" in str(info.value)
    assert FALLBACK_STORE_URL == default_store_url()[0]  # tasks backends still answers
    served.add(FALLBACK_STORE_URL)
    assert FALLBACK_STORE_URL == require_default_store_url()
    served.add(EMBEDDED_STORE_URL)
    assert EMBEDDED_STORE_URL == require_default_store_url()


def test_load_app_imports_module_attribute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tasks worker module:attr`` MUST import from the current directory and refuse
    anything that is not an App."""
    (tmp_path / "cli_probe_app.py").write_text(
        "from tasks_core import App\napp = App('memory://')\nother = 3\n"
    )
    monkeypatch.chdir(tmp_path)
    assert isinstance(load_app("cli_probe_app:app"), App)
    assert isinstance(load_app("cli_probe_app"), App)
    with pytest.raises(InvalidInput):
        load_app("cli_probe_app:other")
    with pytest.raises(InvalidInput):
        load_app("no_such_module_here:app")


@pytest.mark.parametrize(("source", "spec", "says"), [
    ("raise RuntimeError('boom')", "cli_probe_raises:app", "RuntimeError: boom"),
    ("x = (", "cli_probe_syntax:app", "SyntaxError"),
    ("import sys\nsys.exit(3)", "cli_probe_exit:app", "SystemExit: 3"),
    ("import sys\nsys.exit('config missing')", "cli_probe_exit_text:app",
     "SystemExit: config missing"),
    ("raise BaseException('weird')", "cli_probe_base:app", "BaseException: weird"),
    ("", ":app", "--app takes MODULE:ATTR"),
    ("", ".:app", "--app takes MODULE:ATTR"),
])
def test_an_app_module_that_cannot_be_imported_is_one_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, spec: str, says: str
) -> None:
    """``--app`` naming no module, or a module that fails as it is imported (its own
    error, a syntax error, ``sys.exit()``, any ``BaseException``), MUST be
    ``InvalidInput`` quoting that error — one line with exit 2 — not a traceback, not the
    module's exit code."""
    module = spec.partition(":")[0]
    if source:
        (tmp_path / f"{module}.py").write_text(source + "\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInput, match=says):
        load_app(spec)


async def test_demo_runs_end_to_end_on_the_memory_store() -> None:
    """``tasks demo`` MUST run every scenario to its expected end and print a summary."""
    console, out = _console()
    code = await run(["demo", "--store", "memory://"], console=console)
    text = out.getvalue()
    assert 0 == code, text
    assert "every task ended as expected" in text
    for word in ("TaskTimeout", "Cancelled by user", "completed", "summary",
                 'reminder (delayed 3s)'):
        assert word in text
    # Into a pipe, the summary's title is a line of its own (not glued to the last bar).
    assert "summary" in [line.strip() for line in text.splitlines()], text
    sql = installed(EMBEDDED_STORE_URL)  # the hint never asks to install what is there
    assert (sql, not sql) == ("Run it on sqlite:///tasks.db" in text,
                              "Install tasks-store-sql" in text)


async def test_the_demos_tasks_expire_within_a_day_even_unfinished(tmp_path: Path) -> None:
    """Every task the demo submits MUST end within a day: kept for a day once finished,
    and with a ttl of a day, so that the tasks of an interrupted demo do not stay (or get
    run by the next demo) for ever."""
    pytest.importorskip("tasks_store_sql")
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    console, out = _console()
    assert 0 == await run(["demo", "--store", url], console=console), out.getvalue()
    async with App(url) as app:
        stored = (await app.list(System())).items
    assert 8 == len(stored)
    assert {(86400.0, 86400.0)} == {(s.ttl_s, s.retention_s) for s in stored}


def test_console_script_reports_errors_without_a_traceback(tmp_path: Path) -> None:
    """The ``tasks`` entry point MUST print a one-line error and exit 2 on a refusal."""
    proc = subprocess.run(
        [sys.executable, "-m", "tasks_core.cli", "show", "nope", "--system", "--store", "memory://"],
        capture_output=True, text=True, timeout=TIMEOUT * 6, cwd=tmp_path,
    )
    assert 2 == proc.returncode
    assert "TaskNotFound" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("argv", "kind"), [
    (["ls", "--system", "--store", f"nosuchscheme{'x' * 60}://somewhere"], "UnknownStore"),
    (["worker", f"no_such_module_{'y' * 70}:app"], "InvalidInput"),
])
@pytest.mark.parametrize("columns", ["20", "80"])
def test_console_script_prints_a_refusal_on_one_line_whatever_the_width(
    argv: list[str], kind: str, columns: str, tmp_path: Path,
) -> None:
    """A refusal MUST reach stderr as exactly one line, ``error: KIND: message``, however
    long the message and however narrow the terminal, and the exit code MUST be 2."""
    env = {k: v for k, v in os.environ.items() if k not in ("TASKS_STORE", "COLUMNS")}
    env["COLUMNS"] = columns
    proc = subprocess.run(
        [sys.executable, "-m", "tasks_core.cli", *argv],
        capture_output=True, text=True, timeout=TIMEOUT * 6, cwd=tmp_path, env=env,
    )
    assert 2 == proc.returncode, proc.stderr
    lines = proc.stderr.splitlines()
    assert 1 == len(lines), proc.stderr
    assert proc.stderr.endswith("\n")
    assert lines[0].startswith(f"error: {kind}: ")
    assert len(lines[0]) > 100  # longer than any width rich would wrap at here


async def test_worker_takes_prefetch_and_refuses_a_bad_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``tasks worker --prefetch auto|N`` MUST reach the worker (default ``auto``); a bad
    value MUST be refused (``InvalidInput``: exit 2 from the console script) before
    anything is claimed — text that is no number by argparse, saying ``auto`` is taken."""
    parsed = build_parser().parse_args(["worker", "m:app", "--prefetch", "4"])
    assert parsed.prefetch == 4
    assert build_parser().parse_args(["worker", "m:app", "--prefetch", "0"]).prefetch == 0
    assert build_parser().parse_args(["worker", "m:app"]).prefetch == "auto"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["worker", "m:app", "--prefetch", "some"])
    assert "argument --prefetch: 'auto' or a count, not 'some'" in capsys.readouterr().err
    app = _app()
    async with app:
        task = await app.submit("ask", None, ALICE)
        with pytest.raises(InvalidInput, match="prefetch"):
            await _cli(app, "worker", "m:app", "--prefetch", "-1")
        assert (await app.get(task.id, ALICE)).deliveries == 0


async def test_the_cli_worker_tunes_the_collector_while_serving_and_restores_it() -> None:
    """``tasks worker`` MUST serve with what it loaded frozen out of the collector's scans
    and young collections at least ``YOUNG_THRESHOLD`` tracked objects apart, and leave
    the collector as it found it when it returns (SIGTERM: drained, exit 0)."""
    app = make_app()
    seen: list[tuple[int, int]] = []

    @app.task
    async def look(ctx: TaskContext) -> None:
        seen.append((gc.get_threshold()[0], gc.get_freeze_count()))
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:  # the worker's handler
            os.kill(os.getpid(), signal.SIGTERM)

    before = (gc.get_threshold(), gc.get_freeze_count())
    async with app:
        await app.submit(look, None, ALICE)
        code, _ = await asyncio.wait_for(_cli(app, "worker", "m:app", "--no-reaper"), TIMEOUT)
    assert code == 0
    assert len(seen) == 1
    threshold, frozen = seen[0]
    assert threshold >= YOUNG_THRESHOLD
    assert frozen > before[1]
    assert (gc.get_threshold(), gc.get_freeze_count()) == before


def test_tuning_keeps_a_higher_young_threshold_and_undoes_itself() -> None:
    """``tune_for_serving`` MUST never lower a young threshold the process already set
    higher, and its undo MUST restore the thresholds and unfreeze."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD * 3, *before[1:])
    try:
        undo = tune_for_serving()
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD * 3
        assert gc.get_freeze_count() > 0
        undo()
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD * 3
        assert gc.get_freeze_count() == 0
    finally:
        gc.set_threshold(*before)


async def test_stress_without_the_contract_suite_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``tasks stress`` without tasks-contract-tests MUST refuse (``CapabilityNotSupported``)
    and say how to install it, from PyPI and from a clone."""
    monkeypatch.setitem(sys.modules, "tasks_contract_tests.stress", None)  # import fails
    app = _app()
    async with app:
        with pytest.raises(CapabilityNotSupported) as info:
            await _cli(app, "stress", "--store", "memory://")
    assert "pip install tasks-contract-tests" in str(info.value)
    assert "from a clone of the repository, pip install ./packages/contract-tests" in str(
        info.value)


@pytest.mark.parametrize("columns", ["20", "80"])
def test_stress_without_the_contract_suite_refuses_on_one_line(
    columns: str, tmp_path: Path,
) -> None:
    """The console script's ``tasks stress`` without tasks-contract-tests MUST refuse like
    any command: one line on stderr, ``error: CapabilityNotSupported: …``, nothing on
    stdout, exit code 2."""
    script = ("import sys; sys.modules['tasks_contract_tests.stress'] = None; "
              "from tasks_core.cli import main; sys.exit(main())")
    env = {k: v for k, v in os.environ.items() if k not in ("TASKS_STORE", "COLUMNS")}
    env["COLUMNS"] = columns
    proc = subprocess.run(
        [sys.executable, "-c", script, "stress", "--store", "memory://"],
        capture_output=True, text=True, timeout=TIMEOUT * 6, cwd=tmp_path, env=env,
    )
    assert (2, "") == (proc.returncode, proc.stdout), proc.stderr
    lines = proc.stderr.splitlines()
    assert 1 == len(lines), proc.stderr
    assert lines[0].startswith("error: CapabilityNotSupported: tasks stress needs the "
                               "contract suite: pip install tasks-contract-tests")


VERBOSE_PROBE = """
import logging
from tasks_core import App
logging.getLogger("somedriver.command").debug("a driver's payload")
logging.getLogger("somedriver").warning("a driver's warning")
logging.getLogger("tasks_store_probe").debug("a store's debug line")
app = App("memory://")
"""


def test_verbose_shows_tasks_debug_lines_never_a_drivers(tmp_path: Path) -> None:
    """``-v`` MUST show the DEBUG lines of tasks' own loggers (a store's ``tasks_store_…``
    too) and a driver's warnings, never a driver's DEBUG log (it holds task payloads); the
    private-store note MUST be one line whatever the width."""
    (tmp_path / "verbose_probe.py").write_text(VERBOSE_PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("TASKS_STORE", "COLUMNS")}
    env["COLUMNS"] = "40"
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from tasks_core.cli import main; sys.exit(main())",
         "ls", "--system", "--app", "verbose_probe:app", "-v"],
        capture_output=True, text=True, timeout=TIMEOUT * 6, cwd=tmp_path, env=env,
    )
    assert 0 == proc.returncode, proc.stderr
    assert "a store's debug line" in proc.stderr
    assert "a driver's warning" in proc.stderr
    assert "a driver's payload" not in proc.stderr
    [note] = [line for line in proc.stderr.splitlines() if "private to this process" in line]
    assert note.startswith("note: memory:// is private")
    assert note.endswith("between commands and workers.")


def test_log_lines_carry_utc_instants_that_say_so(tmp_path: Path) -> None:
    """Every instant the CLI prints is UTC and says so: a log line's too, whatever the
    machine's time zone (``TZ`` five hours off UTC here) — as ISO 8601 with a ``Z``."""
    (tmp_path / "zone_probe.py").write_text(VERBOSE_PROBE)
    env = {k: v for k, v in os.environ.items() if k != "TASKS_STORE"}
    env["TZ"] = "America/New_York"
    before = datetime.now(UTC).replace(microsecond=0)
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from tasks_core.cli import main; sys.exit(main())",
         "ls", "--system", "--app", "zone_probe:app", "-v"],
        capture_output=True, text=True, timeout=TIMEOUT * 6, cwd=tmp_path, env=env,
    )
    after = datetime.now(UTC)
    assert 0 == proc.returncode, proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if "a store's debug line" in line]
    stamp = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ", line)
    assert stamp is not None, line
    assert before <= datetime.fromisoformat(stamp[1]).replace(tzinfo=UTC) <= after


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://tasks:s3cret@db:5432/x", "postgresql://tasks:***@db:5432/x"),
        ("mysql://root:s3cret@[::1]:3306/x?namespace=a", "mysql://root:***@[::1]:3306/x?namespace=a"),
        ("postgresql://tasks@db/x", "postgresql://tasks@db/x"),
        ("sqlite:///tasks.db", "sqlite:///tasks.db"),
        ("memory://", "memory://"),
        ("mongodb://u:pw@h/db?authMechanismProperties=AWS_SESSION_TOKEN:tok&w=majority",
         "mongodb://u:***@h/db?authMechanismProperties=***&w=majority"),
        ("mongodb://h/db?tlsCertificateKeyFilePassword=s3cret&replicaSet=rs0&tls=true",
         "mongodb://h/db?tlsCertificateKeyFilePassword=***&replicaSet=rs0&tls=true"),
        ("postgresql://db/x?sslpassword=s3cret&sslmode=require&connect_timeout=5",
         "postgresql://db/x?sslpassword=***&sslmode=require&connect_timeout=5"),
        ("mysql://root@h/x?password=s3cret&Namespace=a&token", "mysql://root@h/x?password=***&Namespace=a&***"),
    ],
)
def test_store_urls_are_shown_without_their_password(url: str, shown: str) -> None:
    """A store URL the CLI prints (the worker's banner, the demo's, ``backends``) MUST
    show the password as ``***``, and the value of every query option but a few harmless
    ones (``namespace``, ``w``, ``tls``, ``sslmode``…) too: a session token, a key file's
    password; the rest as it is."""
    from tasks_core.cli._render import shown_url

    assert shown == shown_url(url)


async def test_the_worker_banner_and_backends_never_print_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``tasks worker`` announces the store it serves and ``tasks backends`` the default
    store; neither MUST print the URL's password (worker logs are widely read)."""
    monkeypatch.setenv("TASKS_STORE", "memory://user:s3cret@here")
    _, listed = await _cli(App("memory://"), "backends")
    assert "s3cret" not in listed
    assert "user:***@here" in listed
    app = make_app()
    app.url = "memory://user:s3cret@here"

    @app.task
    async def stop(ctx: TaskContext) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    async with app:
        await app.submit(stop, None, ALICE)
        code, banner = await asyncio.wait_for(
            _cli(app, "worker", "m:app", "--no-reaper"), TIMEOUT)
    assert (0, False) == (code, "s3cret" in banner)
    assert "user:***@here" in banner


async def test_the_worker_banner_names_the_fleet_wide_limits_it_applies() -> None:
    """Each worker applies the limits its own app declares against the shared count, so
    workers that declare a queue differently disagree: the banner MUST name each served
    queue's ``max_running`` and ``rate`` (an exclusive queue's as ``max_running 1``) so a
    mismatch shows in the logs."""
    app = make_app()
    app.queue("lim", max_running=3)
    app.queue("solo", exclusive=True)
    app.queue("rated", rate=(5, 2))

    @app.task(queue="lim")
    async def stop(ctx: TaskContext) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    async with app:
        await app.submit(stop, None, ALICE)
        code, banner = await asyncio.wait_for(
            _cli(app, "worker", "m:app", "--no-reaper", "--queues", "lim,solo,rated,default"),
            TIMEOUT)
    assert 0 == code
    assert ("queues lim (max_running 3), solo (max_running 1), rated (rate 5 per 2s), "
            "default," in " ".join(banner.split())), banner


@pytest.mark.parametrize("store", ["", "  "])
async def test_an_empty_store_option_is_refused_not_taken_for_the_default(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--store ""`` (an unset variable in ``--store "$URL"``) MUST be refused
    (``InvalidInput``) — never open the default store in the current directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TASKS_STORE", raising=False)
    with pytest.raises(InvalidInput, match="--store is empty"):
        await run(["ls", "--system", "--store", store], console=_console()[0])
    assert [] == os.listdir(tmp_path)


@pytest.mark.parametrize("queues", ["", " ", ",,,"])
async def test_an_empty_queues_option_is_refused_not_taken_for_every_queue(
    queues: str
) -> None:
    """``--queues ""`` (an unset variable in ``--queues "$QUEUES"``) MUST be refused like
    ``--queues ,,,`` — never serve every queue — before the worker claims anything."""
    app = make_app()
    async with app:
        task = await app.submit("job", None, ALICE)
        with pytest.raises(InvalidInput, match="queue"):
            async with asyncio.timeout(TIMEOUT):  # (a worker serving every queue runs on)
                await run(["worker", "m:app", "--queues", queues], app=app,
                          console=_console()[0])
        assert 0 == (await app.get(task.id, ALICE)).deliveries
