"""``tasks stress``: the stress harness of tasks-contract-tests, imported only when asked
(core does not depend on it). Everything the command is given is checked before the
harness creates anything — the sizes and ``--timeout`` with the CLI's numbers
(``_options``), ``--out`` here — so a refusal leaves no store file and no report behind.
"""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path

from rich.console import Console

from tasks_core.errors import CapabilityNotSupported, InvalidInput
from tasks_core.plugins import install_hint
from tasks_core.runtime._defaults import default_store_url
from tasks_core.runtime.app import App

__all__ = ["check_out", "cmd_stress"]


def check_out(path: str) -> None:
    """``--out FILE``, which the harness writes only once the run is over (making its
    missing directories): a file name, not a directory, that this process can write — an
    existing file it may write, or a new one below a directory it may write.

    Raises:
        InvalidInput: naming ``--out`` and why it cannot be written.
    """
    if not path.strip():
        raise InvalidInput("--out is blank: name the file of the JSON report")
    target = Path(path)
    if target.is_dir():
        raise InvalidInput(f"--out {path!r} is a directory: name the file of the JSON report")
    if target.exists():
        if not os.access(target, os.W_OK):
            raise InvalidInput(f"--out {path!r} cannot be written: permission denied")
        return
    ancestor = target.absolute().parent
    while not ancestor.exists():  # the harness makes the missing directories
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InvalidInput(f"--out {path!r} cannot be made: {str(ancestor)!r} is a file, "
                           "not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise InvalidInput(f"--out {path!r} cannot be made: {str(ancestor)!r} is not "
                           "writable")


async def cmd_stress(app: App, args: argparse.Namespace, console: Console) -> int:
    """Run the harness on the store, once ``--out`` is checked (the sizes and
    ``--timeout`` were checked with the CLI's other numbers).

    Raises:
        InvalidInput: an ``--out`` that cannot be written, before anything is created.
        CapabilityNotSupported: tasks-contract-tests is not installed (the message says
            how to install it).
    """
    if args.out is not None:
        check_out(args.out)
    try:
        stress = importlib.import_module("tasks_contract_tests.stress")
    except ImportError:
        raise CapabilityNotSupported(
            "tasks stress needs the contract suite: "
            f"{install_hint('tasks-contract-tests')}") from None
    argv = ["--store", args.store or app.url or default_store_url()[0]]
    argv += [f"--{flag}" for flag in ("json", "small") if getattr(args, flag)]
    for option in ("out", "tasks", "writers", "workers", "rounds", "timeout"):
        if getattr(args, option) is not None:
            argv += [f"--{option}", str(getattr(args, option))]
    return int(await stress.main_async(argv, console))
