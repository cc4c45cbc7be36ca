"""The stress harness for real: processes, SQLite, ledgers that survive SIGKILL, reports.

These tests start real OS processes and take a few seconds each (the harness exists to
do that); they need ``tasks-store-sql`` for SQLite and Linux for signals.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console
from tasks_contract_tests.chaos import run_chaos
from tasks_contract_tests.stress import StressSizes, read_ledgers, run_stress
from tasks_contract_tests.stress import main_async as stress_main
from tasks_contract_tests.stress._report import markdown
from tasks_core import InvalidInput
from tasks_core.cli import run as tasks_cli

pytest.importorskip("tasks_store_sql", reason="the real runs use SQLite (tasks-store-sql)")
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and /proc")


def figures(report: dict[str, object], name: str) -> dict[str, int]:
    for item in report["workloads"]:  # type: ignore[attr-defined]
        if item["name"] == name:
            return dict(item["figures"])
    raise AssertionError(name)


@linux
def test_a_small_stress_run_on_sqlite_holds_every_invariant(tmp_path: Path) -> None:
    """``tasks stress`` on SQLite MUST report ``ok`` with exact counts: every CAS race one
    winner and W−1 conflicts, every soak task finished as it must."""
    sizes = StressSizes(tasks=6, writers=3, workers=2, rounds=1, timeout=120)
    report = asyncio.run(run_stress(f"sqlite:///{tmp_path}/stress.db", sizes,
                                    directory=tmp_path / "work"))
    failed = [(w["name"], w["error"], [c["name"] for c in w["checks"] if not c["ok"]])
              for w in report["workloads"] if not w["ok"]]
    assert [] == failed
    assert True is report["ok"]
    cas = figures(report, "cas")
    assert (36, 12, 24) == (cas["writes"], cas["applied"],
                            cas.get("RevisionConflict", 0) + cas.get("LeaseLost", 0))
    soak = figures(report, "soak")
    assert (6, 0) == (soak["tasks"], soak["unrecorded_claims"])
    assert soak["runs"] == soak["deliveries"]


@linux
def test_a_worker_killed_mid_run_is_recovered_on_sqlite(tmp_path: Path) -> None:
    """The ``kill-running`` scenario MUST recover every task the killed worker held (each
    delivered twice, marked recovered) with nothing lost or doubled."""
    report = asyncio.run(run_chaos(f"sqlite:///{tmp_path}/chaos.db", ["kill-running"],
                                   timeout=120, directory=tmp_path / "work"))
    (item,) = report["workloads"]
    assert (True, None) == (item["ok"], item["error"])
    assert (1, 4, 4) == (item["tried"]["kills"], item["figures"]["interrupted_runs"],
                         item["figures"]["recovered"])


@linux
def test_ledger_rows_committed_before_a_sigkill_survive_it(tmp_path: Path) -> None:
    """Every row a process committed before it was SIGKILLed MUST be read back."""
    script = textwrap.dedent(f"""
        import sys
        from tasks_contract_tests.stress import Ledger
        ledger = Ledger({str(tmp_path / "p.ledger")!r}, "worker")
        for n in range(50):
            ledger.record("start", f"t{{n}}", delivery=1, nonce=str(n))
        print("written", flush=True)
        sys.stdin.readline()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert "written\n" == proc.stdout.readline()  # type: ignore[union-attr]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    assert [str(n) for n in range(50)] == [e.nonce for e in read_ledgers(tmp_path)]


def test_tasks_stress_refuses_a_store_private_to_one_process(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``tasks stress --store memory://`` MUST exit 2 without running anything, saying why
    in one ``error: KIND: message`` line, as every refusal does; so MUST sizes it cannot
    run."""
    console = Console(record=True, width=200)
    assert 2 == asyncio.run(tasks_cli(["stress", "--store", "memory://"], console=console))
    assert capsys.readouterr().err.startswith(
        "error: CapabilityNotSupported: the memory store is private to one process")
    with pytest.raises(InvalidInput, match=r"--writers must be an integer in 2\.\.256, not 1"):
        asyncio.run(tasks_cli(["stress", "--store", "sqlite:///x.db", "--writers", "1"],
                              console=console))
    assert 2 == asyncio.run(stress_main(["--store", "sqlite:///x.db", "--writers", "1"],
                                        console=console))
    assert "error: InvalidInput: --writers must be an integer from 2, not 1\n" == (
        capsys.readouterr().err)


def test_tasks_stress_refuses_a_store_it_cannot_reach(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A store that cannot be opened MUST be a refusal — exit 2, one ``error: KIND:``
    line, nothing run — not a run whose invariants all "failed" (exit 1): CI must tell a
    database that is down from a store that broke a rule."""
    missing = tmp_path / "no-such-directory" / "x.db"
    code = asyncio.run(tasks_cli(["stress", "--store", f"sqlite:///{missing}", "--small"],
                                 console=Console(record=True, width=200)))
    err = capsys.readouterr().err
    assert (2, True) == (code, err.startswith("error: StoreUnavailable: ")), err
    assert 1 == len(err.splitlines())


def test_tasks_stress_names_the_package_to_install_when_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without tasks-contract-tests, ``tasks stress`` MUST refuse like any command —
    ``CapabilityNotSupported``, which ``tasks`` prints as one ``error:`` line, exit 2 —
    saying "pip install tasks-contract-tests"."""
    import tasks_core.cli._stress as stress_command
    from tasks_core.errors import CapabilityNotSupported

    def missing(name: str) -> object:
        raise ImportError(name)

    monkeypatch.setattr(stress_command.importlib, "import_module", missing)
    with pytest.raises(CapabilityNotSupported, match="pip install tasks-contract-tests"):
        asyncio.run(tasks_cli(["stress", "--store", "sqlite:///x.db"],
                              console=Console(record=True, width=200)))


def test_the_reliability_page_sums_what_was_tried_and_lost() -> None:
    """The generated page MUST hold one row per workload and the totals of the reports."""
    def workload(name: str, kills: int, lost: int) -> dict[str, object]:
        tried = {"processes": 3, "tasks": 10, "kills": kills, "stops": 0, "restarts": 0,
                 "connections_cut": 0, "bad_inputs": 2}
        return {"name": name, "ok": lost == 0, "skipped": None, "error": None, "seconds": 1.0,
                "tried": tried, "lost": lost, "doubled": 0, "overwritten": 0,
                "figures": {"runs": 12}, "checks": [], "notes": []}

    report = {"kind": "chaos", "ok": False, "store": "sqlite", "url": "sqlite:///x.db",
              "started": "2026-01-01T00:00:00+00:00", "seconds": 2.0,
              "host": {"python": "3.11", "cpus": 2}, "versions": {},
              "workloads": [workload("kill-running", 1, 0), workload("stale-worker", 2, 1)]}
    page = markdown([json.loads(json.dumps(report))])
    assert 1 == page.count("| sqlite | chaos `kill-running` | 3 | 10 | 1 |")
    assert "6 processes, 20 tasks, 3 SIGKILLs" in page
    assert "**1 lost, 0 doubled, 0 outcomes overwritten by a stale worker.**" in page


@linux
def test_the_connections_of_a_process_are_found_by_its_pid() -> None:
    """``local_ports`` MUST find the local port of every TCP connection a process holds
    to a server port (how the chaos runner cuts only the workers' connections)."""
    import os
    import socket

    from tasks_contract_tests.chaos._database import local_ports

    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            mine = client.getsockname()[1]
            assert {mine} == local_ports([os.getpid()], port)
