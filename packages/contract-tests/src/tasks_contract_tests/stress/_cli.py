"""The stress run and its command line (``tasks stress`` delegates here)."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from tasks_core import TasksError, find_store
from tasks_core.rules import check_limit

from tasks_contract_tests.stress._outcome import Outcome, bounded
from tasks_contract_tests.stress._report import build_report, print_summary, write_report
from tasks_contract_tests.stress._target import fresh_target
from tasks_contract_tests.stress._workloads import SoakSizes, cas_workload, soak_workload

__all__ = ["SMALL", "StressSizes", "build_parser", "main", "main_async", "run_stress"]

WORKLOADS = ("cas", "soak")


@dataclass(frozen=True)
class StressSizes:
    """Sizes of ``tasks stress``.

    Attributes:
        tasks: CAS tasks, and soak tasks per round.
        writers: CAS writer processes.
        workers: soak worker processes.
        rounds: soak rounds.
        timeout: seconds each workload may take (a hard bound).
        seed: the soak client's seed.
    """

    tasks: int = 100
    writers: int = 5
    workers: int = 4
    rounds: int = 4
    timeout: float = 300.0
    seed: int = 0


SMALL = StressSizes(tasks=16, writers=3, workers=2, rounds=2, timeout=120.0)
"""The fast subset (CI)."""


async def run_stress(
    url: str,
    sizes: StressSizes = StressSizes(),
    *,
    workloads: Sequence[str] = WORKLOADS,
    directory: Path | None = None,
    keep: bool = False,
) -> dict[str, Any]:
    """Run the stress workloads against the store at ``url``; return the JSON report.

    Args:
        url: the store (must be shared by processes: not ``memory://``).
        sizes: the sizes.
        workloads: ``cas`` and/or ``soak``.
        directory: where ledgers and process logs go (default: a temporary directory,
            removed when every invariant held).
        keep: keep the store namespaces (and the directory) for inspection.
    """
    started = time.time()
    work = directory or Path(tempfile.mkdtemp(prefix="tasks-stress-"))
    outcomes: list[Outcome] = []
    if "cas" in workloads:
        outcomes.append(await bounded(
            "cas", url, work, cas_workload(sizes.tasks, sizes.writers), timeout=sizes.timeout,
            params={"tasks": sizes.tasks, "writers": sizes.writers}, keep=keep))
    if "soak" in workloads:
        soak = SoakSizes(workers=sizes.workers, rounds=sizes.rounds, tasks=sizes.tasks,
                         seed=sizes.seed)
        outcomes.append(await bounded(
            "soak", url, work, soak_workload(soak, deadline=sizes.timeout * 0.75),
            timeout=sizes.timeout, keep=keep,
            params={"workers": soak.workers, "rounds": soak.rounds, "tasks": soak.tasks,
                    "concurrency": soak.concurrency, "lease": soak.lease}))
    report = build_report("stress", url, outcomes, started)
    report["directory"] = str(work)
    if report["ok"] and directory is None and not keep:
        shutil.rmtree(work, ignore_errors=True)
        report["directory"] = None
    return report


def unsuitable(url: str) -> str | None:
    """Why the store at ``url`` cannot be stressed, as ``KIND: message`` (``None``: it
    can)."""
    try:
        spec = find_store(url)
    except TasksError as exc:
        return f"{type(exc).__name__}: {exc}"
    if not spec.capabilities.multi_process:
        return (f"CapabilityNotSupported: the {spec.name} store is private to one process; "
                "stress a store that several processes share (sqlite:///file.db, "
                "postgresql://…)")
    return None


async def unreachable(url: str) -> str | None:
    """Why the store at ``url`` cannot be opened, as ``KIND: message`` (``None``: it opens
    — in a namespace of its own, dropped again). A store that is down is refused (exit
    2), never reported as broken invariants (exit 1)."""
    try:
        target = await fresh_target(url, prefix="p")
        try:
            store = await target.open()
            await store.aclose()
        finally:
            await target.drop()
    except TasksError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``tasks stress`` / ``python -m tasks_contract_tests.stress``."""
    parser = argparse.ArgumentParser(prog="tasks stress", description=__doc__)
    add_stress_arguments(parser)
    parser.add_argument("--store", required=True, metavar="URL", help="the store to stress")
    return parser


def add_stress_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option but ``--store`` (core's ``tasks stress`` parser has the same)."""
    default = StressSizes()
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument("--out", metavar="FILE", help="also write the JSON report to FILE")
    parser.add_argument("--small", action="store_true", help="the fast subset (CI sizes)")
    parser.add_argument("--tasks", type=int, help=f"CAS tasks and soak tasks per round "
                                                  f"(default {default.tasks})")
    parser.add_argument("--writers", type=int, help=f"CAS writers (default {default.writers})")
    parser.add_argument("--workers", type=int, help=f"soak workers (default {default.workers})")
    parser.add_argument("--rounds", type=int, help=f"soak rounds (default {default.rounds})")
    parser.add_argument("--timeout", type=float,
                        help=f"seconds per workload (default {default.timeout:g})")
    parser.add_argument("--only", choices=WORKLOADS, action="append",
                        help="run only this workload (repeatable)")
    parser.add_argument("--workdir", metavar="DIR", help="ledgers and logs (default: temp)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the namespaces and the work directory")


def sizes_of(args: argparse.Namespace) -> StressSizes:
    """The sizes the arguments ask for."""
    sizes = SMALL if args.small else StressSizes()
    chosen = {k: getattr(args, k) for k in ("tasks", "writers", "workers", "rounds", "timeout")
              if getattr(args, k, None) is not None}
    return replace(sizes, **chosen)


async def main_async(argv: Sequence[str], console: Console | None = None) -> int:
    """Run ``tasks stress`` with ``argv``; exit code 0 only when every invariant held."""
    args = build_parser().parse_args(list(argv))
    sizes = sizes_of(args)
    try:  # as `tasks stress` checks them (its own are checked before it gets here)
        for name in ("tasks", "workers", "rounds"):
            check_limit(getattr(sizes, name), what=f"--{name}")
        check_limit(sizes.writers, minimum=2, what="--writers")
    except TasksError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    problem = unsuitable(args.store) or await unreachable(args.store)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    report = await run_stress(
        args.store, sizes, workloads=args.only or WORKLOADS,
        directory=Path(args.workdir) if args.workdir else None, keep=args.keep,
    )
    text = json.dumps(report, indent=2)
    if args.out:
        write_report(args.out, text)
    if args.json:
        print(text)
    else:
        print_summary(report, console or Console())
        if report.get("directory"):
            (console or Console()).print(f"ledgers and logs: {report['directory']}",
                                         highlight=False)
    return 0 if report["ok"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tasks_contract_tests.stress``."""
    return asyncio.run(main_async(sys.argv[1:] if argv is None else argv))
