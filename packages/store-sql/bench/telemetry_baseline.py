"""Telemetry off against the code from before telemetry existed, in one run.

Each round runs one child process per code tree, alternating which goes first: the child
puts that tree's ``packages/*/src`` first on ``PYTHONPATH`` (so it imports that code, not
the editable install), submits ``--tasks`` no-op tasks to a fresh PostgreSQL namespace as
bench.py does (a fifth one by one, the rest in gathered batches), and burns them down with
one worker (concurrency 8, prefetch auto) on a store opened afresh — telemetry never
enabled, and never imported by the harness. It reports the submit and burn-down rates and
the CPU time its process spent per task in each phase (worker and driver; the server's
excluded), which moves less than a rate with the machine's load. Figures belong in
LOG.md, never here. A tree is a path: a ``git worktree`` of each commit compared (not a
working tree others are editing).

    git worktree add /tmp/pre-telemetry 8441d05
    git worktree add /tmp/today HEAD
    python packages/store-sql/bench/telemetry_baseline.py --code before=/tmp/pre-telemetry \
        --code today=/tmp/today --rounds 6 --tasks 4000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = ("core", "store-sql", "store-memory")


async def _child(args: argparse.Namespace) -> dict[str, float | str]:
    sys.path.insert(0, str(HERE))
    import bench
    import tasks_core
    from tasks_store_sql.plugin import drop_namespace

    namespace = "telb_" + secrets.token_hex(3)
    target = bench._sql_target("postgresql", args.postgres_url, namespace, None)
    probe = bench.Probe()
    await bench._ensure_database(bench._dsn(args))
    try:
        store = await target.open()
        try:
            cpu = time.process_time()
            single, batched = await bench.enqueue(bench.make_app(store, probe), args.tasks,
                                                  args.batch)
            submit_cpu = time.process_time() - cpu
        finally:
            await target.close(store)
        store = await target.second(store)
        try:
            cpu = time.process_time()
            rate = await bench.burn_down(bench.make_app(store, probe), probe, args.tasks,
                                         args.concurrency, "auto")
            burn_cpu = time.process_time() - cpu
        finally:
            await target.close(store)
    finally:
        await drop_namespace(args.postgres_url, namespace)
    return {"core": str(Path(tasks_core.__file__).parent), "submit_1x1": single,
            "submit_batched": batched, "burn_down": rate,
            "submit_cpu_us": submit_cpu / args.tasks * 1e6,
            "burn_cpu_us": burn_cpu / args.tasks * 1e6}


def _run_child(tree: Path, args: argparse.Namespace) -> dict[str, float | str]:
    paths = [str(tree / "packages" / name / "src") for name in PACKAGES]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    command = [sys.executable, __file__, "--child", "--tasks", str(args.tasks),
               "--batch", str(args.batch), "--concurrency", str(args.concurrency),
               "--postgres-url", args.postgres_url]
    out = subprocess.run(command, env=env, check=False, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the child on {tree} failed:\n{out.stderr}")
    figures: dict[str, float | str] = json.loads(out.stdout.strip().splitlines()[-1])
    expected = str(tree / "packages" / "core" / "src" / "tasks_core")
    if figures["core"] != expected:
        raise RuntimeError(f"the child imported {figures['core']}, not {expected}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", action="append", default=[], metavar="NAME=PATH",
                        help="a code tree to measure (twice or more)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--postgres-url",
                        default="postgresql+asyncpg://postgres@127.0.0.1:5432/tasks_bench")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_child(args))))
        return
    trees = {name: Path(path).resolve() for name, path in
             (code.split("=", 1) for code in args.code)}
    if len(trees) < 2:
        parser.error("give at least two --code NAME=PATH")
    names = list(trees)
    figures: dict[str, list[dict[str, float | str]]] = {name: [] for name in names}
    keys = ("submit_1x1", "submit_batched", "burn_down", "submit_cpu_us", "burn_cpu_us")
    print("| round | code | " + " | ".join(keys) + " |")
    for number in range(args.rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            result = _run_child(trees[name], args)
            figures[name].append(result)
            print(f"| {number + 1} | {name} | "
                  + " | ".join(f"{float(result[k]):,.0f}" for k in keys) + " |", flush=True)
    for name in names:
        medians = [statistics.median(float(r[k]) for r in figures[name]) for k in keys]
        print(f"| median | {name} | " + " | ".join(f"{m:,.0f}" for m in medians) + " |")


if __name__ == "__main__":
    main()
