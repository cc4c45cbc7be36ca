"""Refusals of the ``tasks`` command line that outside testers found: a number in digits
other than ASCII's, a duration refusal showing seconds instead of the text typed, a
``$TASKS_STORE`` set but blank, ``tasks stress --out`` checked only after the run.

Rules: an integer option takes ASCII digits with an optional sign and nothing else, a
duration option ASCII numbers too (argparse's usage error naming the option, exit 2); a
duration refusal quotes the option's text as typed, with the range of its one check
(``durations.check_duration``); a blank ``$TASKS_STORE`` is refused wherever the default
store would be used; ``tasks stress`` checks ``--out`` before it creates anything.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _cli_kit import DURATION_OPTIONS, cli, refused_before_any_claim
from _runtime_kit import TIMEOUT, make_app
from rich.console import Console
from tasks_core import CapabilityNotSupported, InvalidInput, System
from tasks_core.cli import build_parser, run
from tasks_core.durations import MAX_WAIT_S, MIN_INTERVAL_S
from tasks_core.rules import MAX_LEASE_S

pytestmark = pytest.mark.anyio

NOT_ASCII = ["٣", "۳", "३", "３", "٣٠", "-٣", "1_000", " 3", "3 ", "3\u00a0"]
"""Numbers Python's ``int()`` or ``float()`` read (Arabic-Indic, extended Arabic-Indic,
Devanagari and full-width digits, an underscore, white space), which no option takes."""

INTEGER_OPTIONS = [
    (["ls", "--system"], "--limit"),
    (["ls", "--system"], "--scan"),
    (["reap", "--system"], "--limit"),
    (["stress"], "--tasks"),
    (["stress"], "--writers"),
    (["stress"], "--workers"),
    (["stress"], "--rounds"),
    (["dashboard"], "--port"),
    (["worker", "m:app"], "--concurrency"),
    (["worker", "m:app"], "--prefetch"),
    (["worker", "m:app"], "--metrics-port"),
    (["submit", "job", "--user", "u"], "--priority"),
]
"""Every integer option of ``tasks``: ``(the command before it, the option)``."""

def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Parse ``argv``: it MUST be argparse's usage error (exit 2); what it printed."""
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert 2 == info.value.code
    return capsys.readouterr().err


# -- 1. ASCII digits only ----------------------------------------------------------------


@pytest.mark.parametrize(("command", "option"), INTEGER_OPTIONS + DURATION_OPTIONS)
@pytest.mark.parametrize("value", NOT_ASCII)
def test_a_number_not_in_ascii_digits_is_refused_naming_the_option(
    command: list[str], option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``submit --priority=٣`` was taken as 3 (Python's ``int()`` reads any Unicode
    digit, an underscore and white space). Every numeric option MUST take ASCII digits
    only — a sign, a point and an exponent for a duration — and refuse anything else
    naming the option, before anything runs."""
    err = _usage_error([*command, f"{option}={value}"], capsys)
    assert f"argument {option}" in err, err


@pytest.mark.parametrize(("command", "option"), INTEGER_OPTIONS)
@pytest.mark.parametrize(("text", "value"), [("7", 7), ("+7", 7), ("-7", -7), ("007", 7)])
def test_an_integer_in_ascii_digits_with_a_sign_is_read(
    command: list[str], option: str, text: str, value: int
) -> None:
    """ASCII digits with an optional sign MUST still be read as that integer (its check,
    not the parser, judges the range)."""
    args = build_parser().parse_args([*command, f"{option}={text}"])
    assert value == getattr(args, option.removeprefix("--").replace("-", "_"))


@pytest.mark.parametrize(("command", "option"), DURATION_OPTIONS)
@pytest.mark.parametrize("text", ["1e3", ".5", "2.", "-1.5E-3", "nan", "-inf", "Infinity"])
def test_a_duration_in_ascii_is_read_for_its_check_to_judge(
    command: list[str], option: str, text: str
) -> None:
    """A decimal, an exponent, NaN and the infinities MUST still reach the duration's
    check (which refuses what is out of range), read exactly as ``float`` reads them."""
    args = build_parser().parse_args([*command, f"{option}={text}"])
    value = getattr(args, option.removeprefix("--").replace("-", "_"))
    assert repr(float(text)) == repr(float(value))


@pytest.mark.parametrize("text", ["٣s", "٣", "３０s", "1_0s", "۳m"])
async def test_a_delay_not_in_ascii_digits_is_refused(text: str, tmp_path: Path) -> None:
    """``--delay`` and a ``--many`` line's ``delay`` MUST refuse digits other than ASCII
    (``InvalidInput`` naming the option, quoting the text), nothing written."""
    lines = tmp_path / "l.jsonl"
    lines.write_text(json.dumps({"task": "job", "delay": text}) + "\n", encoding="utf-8")
    app = make_app()
    async with app:
        with pytest.raises(InvalidInput, match=f"--delay .*not {re.escape(repr(text))}"):
            await cli(app, "submit", "job", "--user", "alice", f"--delay={text}")
        with pytest.raises(InvalidInput,
                           match=f"line 1: delay .*not {re.escape(repr(text))}"):
            await cli(app, "submit", "--many", str(lines), "--user", "alice")
        assert [] == (await app.list(System())).items


# -- 2. a duration refusal quotes the text as typed --------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("367d", 367 * 86400), ("40000h", 40000 * 3600), ("400.5d", 400.5 * 86400),
    ("-5s", -5), ("-1.5m", -90.0), ("4e2d", 400 * 86400),
])
async def test_a_delay_refusal_quotes_the_text_typed_and_the_range(
    text: str, seconds: float, tmp_path: Path
) -> None:
    """``--delay 367d`` was refused as ``not 31708800``: seconds the user never typed.
    The refusal MUST name ``--delay``, give its range (``[0, MAX_WAIT_S]``) and quote the
    text as typed; a ``--many`` line's ``delay`` likewise; nothing written."""
    lines = tmp_path / "l.jsonl"
    lines.write_text(json.dumps({"task": "job", "delay": text}) + "\n", encoding="utf-8")
    app = make_app()
    async with app:
        for argv, prefix in [(["submit", "job", "--user", "alice", f"--delay={text}"],
                              "--delay"),
                             (["submit", "--many", str(lines), "--user", "alice"],
                              "line 1: delay")]:
            with pytest.raises(InvalidInput) as info:
                await cli(app, *argv)
            message = str(info.value)
            assert message.startswith(prefix), message
            assert f"[0, {MAX_WAIT_S}] seconds" in message, message
            assert message.endswith(f"not {text!r}"), message
            assert f"not {seconds}" not in message, message
            assert f"not {float(seconds)!r}" not in message, message
        assert [] == (await app.list(System())).items


@pytest.mark.parametrize(("argv", "option", "named", "span"), [
    (["worker", "m:app", "--lease=1e9"], "--lease", "lease_for",
     f"[{MIN_INTERVAL_S}, {MAX_LEASE_S}]"),
    (["worker", "m:app", "--input-park=1e400"], "--input-park", "input_park",
     f"[{MIN_INTERVAL_S}, {MAX_WAIT_S}]"),
    (["worker", "m:app", "--reap-interval=.0001"], "--reap-interval", "reap_interval",
     f"[{MIN_INTERVAL_S}, {MAX_WAIT_S}]"),
    (["worker", "m:app", "--drain-timeout=-1.50"], "--drain-timeout", "drain_timeout",
     f"[0, {MAX_WAIT_S}]"),
    (["workers", "--system", "--lease=1e9"], "--lease", None,
     f"[{MIN_INTERVAL_S}, {MAX_LEASE_S}]"),
    (["stress", "--store", "sqlite:///never.db", "--timeout=+1e9"], "--timeout", None,
     f"(0, {MAX_WAIT_S}]"),
])
async def test_a_duration_option_refusal_quotes_the_text_typed(
    argv: list[str], option: str, named: str | None, span: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``tasks worker --lease 1e9`` was refused as ``lease_for … not 1000000000.0``:
    neither the option nor the value typed. The refusal MUST name the option (and the
    worker's argument its check names), give the range and quote the text as typed,
    before anything is claimed or started."""
    monkeypatch.setitem(sys.modules, "tasks_contract_tests.stress", None)
    typed = argv[-1].partition("=")[2]
    message = await refused_before_any_claim(*argv)
    assert message.startswith(option if named is None else f"{option} ({named})"), message
    assert span in message, message
    assert message.endswith(f"not {typed!r}"), message


# -- 3. a blank $TASKS_STORE -------------------------------------------------------------


@pytest.mark.parametrize("blank", ["", "  ", "\t\n"])
@pytest.mark.parametrize("argv", [
    ["submit", "job", "--user", "alice"],
    ["ls", "--system"],
    ["backends"],
    ["migrate"],
])
async def test_a_blank_tasks_store_is_refused_not_taken_for_the_default(
    blank: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TASKS_STORE='  ' tasks submit …`` submitted to ``sqlite:///tasks.db`` here: a
    variable set but blank is a mistake, and MUST be refused (``InvalidInput`` naming
    ``$TASKS_STORE``), no store opened or created."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TASKS_STORE", blank)
    with pytest.raises(InvalidInput, match=r"\$TASKS_STORE is set but blank"):
        await run(argv, console=Console(file=io.StringIO()))
    assert [] == os.listdir(tmp_path)


async def test_a_blank_tasks_store_is_not_read_when_a_store_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``--store`` the variable is not read: a blank one MUST not matter."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TASKS_STORE", " ")
    out = io.StringIO()
    code = await run(["submit", "job", "--user", "alice", "--store", "memory://"],
                     console=Console(file=out))
    assert (0, True) == (code, out.getvalue().startswith("created: "))


def test_the_console_script_refuses_a_blank_tasks_store_on_one_line(tmp_path: Path) -> None:
    """From the console script: exit 2, one line ``error: InvalidInput: …``, no file."""
    env = {**os.environ, "TASKS_STORE": "   "}
    proc = subprocess.run(
        [sys.executable, "-m", "tasks_core.cli", "submit", "job", "--user", "alice"],
        capture_output=True, text=True, timeout=TIMEOUT * 6, cwd=tmp_path, env=env,
    )
    assert 2 == proc.returncode, proc.stderr
    assert 1 == len(proc.stderr.splitlines()), proc.stderr
    assert proc.stderr.startswith("error: InvalidInput: $TASKS_STORE"), proc.stderr
    assert [] == os.listdir(tmp_path)


# -- 4. tasks stress checks --out before it creates anything -----------------------------


def _out_cases(tmp_path: Path) -> dict[str, str]:
    """Reports ``--out`` cannot be written to: a directory, under a file, blank."""
    (tmp_path / "plain").write_text("x")
    (tmp_path / "folder").mkdir()
    return {"a directory": str(tmp_path / "folder"),
            "under a file": str(tmp_path / "plain" / "r.json"),
            "deeper under a file": str(tmp_path / "plain" / "d" / "r.json"),
            "blank": "", "white space": "  "}


@pytest.mark.parametrize("case", ["a directory", "under a file", "deeper under a file",
                                  "blank", "white space"])
async def test_stress_refuses_an_out_it_cannot_write_before_anything(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tasks stress --out DIR`` created the SQLite store file, ran every workload and
    only then failed with a traceback. ``--out`` MUST be refused (``InvalidInput`` naming
    it) before the harness is even imported, no file created."""
    monkeypatch.setitem(sys.modules, "tasks_contract_tests.stress", None)
    out = _out_cases(tmp_path)[case]
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(InvalidInput, match="--out"):
        await run(["stress", "--store", f"sqlite:///{tmp_path / 's.db'}", "--out", out],
                  console=Console(file=io.StringIO()))
    assert before == sorted(os.listdir(tmp_path))


@pytest.mark.parametrize("name", ["r.json", "new/dirs/r.json", "plain"])
async def test_stress_takes_an_out_it_can_write(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new file, one in directories still to be made (the harness makes them) and an
    existing file MUST pass the check — which creates nothing itself."""
    monkeypatch.setitem(sys.modules, "tasks_contract_tests.stress", None)
    _out_cases(tmp_path)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(CapabilityNotSupported):  # past the check: the harness is missing
        await run(["stress", "--store", f"sqlite:///{tmp_path / 's.db'}",
                   "--out", str(tmp_path / name)], console=Console(file=io.StringIO()))
    assert before == sorted(os.listdir(tmp_path))


def test_the_console_script_refuses_stress_out_before_it_creates_the_store(
    tmp_path: Path,
) -> None:
    """From the console script, with the harness installed: exit 2, one line, and no
    SQLite file left behind."""
    pytest.importorskip("tasks_store_sql")
    pytest.importorskip("tasks_contract_tests.stress")
    (tmp_path / "folder").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "tasks_core.cli", "stress", "--store", "sqlite:///s.db",
         "--out", "folder", "--tasks", "1", "--writers", "2", "--workers", "1",
         "--rounds", "1", "--timeout", "5"],
        capture_output=True, text=True, timeout=TIMEOUT * 6, cwd=tmp_path,
    )
    assert 2 == proc.returncode, proc.stderr
    assert 1 == len(proc.stderr.splitlines()), proc.stderr
    assert proc.stderr.startswith("error: InvalidInput: --out"), proc.stderr
    assert ["folder"] == os.listdir(tmp_path)
