"""The chaos runner and its command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from tasks_contract_tests.chaos import _scenarios as s
from tasks_contract_tests.stress._outcome import Body, Outcome, bounded
from tasks_contract_tests.stress._report import build_report, print_summary, write_report
from tasks_contract_tests.stress._workloads import SoakSizes

__all__ = ["FAST", "SCENARIOS", "main", "main_async", "run_chaos"]

SCENARIOS: dict[str, Body] = {
    "kill-running": s.kill_running,
    "stale-worker": s.stale_worker,
    "kill-in-backoff": s.kill_in_backoff,
    "kill-in-input-wait": s.kill_in_input_wait,
    "sigterm-drain": s.sigterm_drain,
    "connections": s.connections(SoakSizes(workers=3, rounds=3, tasks=24)),
}
"""Every scenario by name; its function's docstring says what it does and what must
hold afterwards."""

FAST = ("kill-running", "stale-worker")
"""The subset CI runs."""


async def run_chaos(
    url: str,
    scenarios: Sequence[str] = tuple(SCENARIOS),
    *,
    timeout: float = 240.0,
    directory: Path | None = None,
    keep: bool = False,
) -> dict[str, Any]:
    """Run ``scenarios`` against the store at ``url``, one after the other, each in a
    namespace of its own and bounded by ``timeout``; return the JSON report."""
    started = time.time()
    work = directory or Path(tempfile.mkdtemp(prefix="tasks-chaos-"))
    outcomes: list[Outcome] = []
    for name in scenarios:
        outcomes.append(await bounded(name, url, work, SCENARIOS[name], timeout=timeout,
                                      params={"lease": s.LEASE}, keep=keep))
    report = build_report("chaos", url, outcomes, started)
    report["directory"] = str(work)
    if report["ok"] and directory is None and not keep:
        shutil.rmtree(work, ignore_errors=True)
        report["directory"] = None
    return report


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``python -m tasks_contract_tests.chaos``."""
    parser = argparse.ArgumentParser(prog="python -m tasks_contract_tests.chaos",
                                     description="Chaos scenarios against a store.")
    parser.add_argument("--store", required=True, metavar="URL")
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS),
                        help="run only this scenario (repeatable; default: all)")
    parser.add_argument("--fast", action="store_true",
                        help=f"only the CI subset ({', '.join(FAST)})")
    parser.add_argument("--timeout", type=float, default=240.0,
                        help="seconds each scenario may take (default 240)")
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument("--out", metavar="FILE", help="also write the JSON report to FILE")
    parser.add_argument("--workdir", metavar="DIR", help="ledgers and logs (default: temp)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the namespaces and the work directory")
    return parser


async def main_async(argv: Sequence[str], console: Console | None = None) -> int:
    """Run the chaos command line; exit code 0 only when every invariant held."""
    args = build_parser().parse_args(list(argv))
    if not sys.platform.startswith("linux"):
        print("error: the chaos scenarios need Linux (signals, /proc)", file=sys.stderr)
        return 2
    chosen = args.scenario or (FAST if args.fast else tuple(SCENARIOS))
    report = await run_chaos(args.store, chosen, timeout=args.timeout,
                             directory=Path(args.workdir) if args.workdir else None,
                             keep=args.keep)
    text = json.dumps(report, indent=2)
    if args.out:
        write_report(args.out, text)
    console = console or Console()
    if args.json:
        print(text)
    else:
        print_summary(report, console)
        if report.get("directory"):
            console.print(f"ledgers and logs: {report['directory']}", highlight=False)
    return 0 if report["ok"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tasks_contract_tests.chaos``."""
    return asyncio.run(main_async(sys.argv[1:] if argv is None else argv))
