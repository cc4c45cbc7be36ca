"""A worker process of a stress run: the real ``tasks worker`` command on the stress app.

    python -m tasks_contract_tests.stress._worker --store URL --options JSON --ledger FILE
        [--lease 2] [--concurrency 4] [--prefetch auto] [--input-park 1] [--drain-timeout 10]

Opens its own store connection, wraps it in a :class:`RecordingStore`, prints ``ready``
and serves until SIGTERM (drain) like any worker; its exit code is the command's (0: the
drain settled, nothing left running) and is written to the ledger as ``exit``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys

from rich.console import Console
from tasks_core import open_store
from tasks_core.cli import run

from tasks_contract_tests.stress._handlers import build_app
from tasks_contract_tests.stress._ledger import Ledger
from tasks_contract_tests.stress._recording import RecordingStore
from tasks_contract_tests.stress._target import add_options_argument, redact


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tasks_contract_tests.stress._worker")
    add_options_argument(parser)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--prefetch", default="auto", help="auto or N (tasks worker checks)")
    parser.add_argument("--input-park", type=float, default=1.0)
    parser.add_argument("--drain-timeout", type=float, default=10.0)
    parser.add_argument("--recover", choices=("retry", "fail"), default="retry")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


async def _serve(args: argparse.Namespace) -> int:
    ledger = Ledger(args.ledger, "worker")
    store = RecordingStore(await open_store(args.store, **json.loads(args.options)), ledger)
    app = build_app(store=store, ledger=ledger)
    app.url = redact(args.store)
    code: int | None = None
    try:
        await store.now()  # connected
        print("ready", flush=True)
        code = await run(
            ["worker", "tasks_contract_tests.stress:app", "--lease", str(args.lease),
             "--concurrency", str(args.concurrency), "--prefetch", str(args.prefetch),
             "--input-park", str(args.input_park),
             "--drain-timeout", str(args.drain_timeout), "--recover", args.recover,
             "--no-reaper"],
            app=app, console=Console(stderr=True),
        )
        return code
    finally:
        ledger.record("exit", outcome=str(code) if code is not None else "error")
        await store.aclose()
        ledger.close()


def main(argv: list[str] | None = None) -> int:
    """Run one worker process; return its exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
