"""``--app MODULE:ATTR``: which app a command acts on.

Rules: every command on an app takes ``--app`` before the command (``tasks --app A ls``)
or after it (``tasks ls --app A``), and ``tasks worker`` its APP too; the app is given
once — twice (even the same one) is ``InvalidInput`` before the command runs, never one
of them silently served. ``tasks worker`` and ``tasks periodic`` act on the user's app
only: without one they are refused (:data:`NEEDS_APP`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from tasks_core.errors import InvalidInput

__all__ = ["NEEDS_APP", "add_app_option", "one_app"]

NEEDS_APP = {
    "worker": "tasks worker runs your app's tasks: tasks worker myapp:app (or --app "
              "myapp:app)",
    "periodic": "tasks periodic lists your app's schedules: tasks periodic --app myapp:app "
                "--system",
}
"""The commands that act on the user's app only, and their refusal without one."""


class _Given(argparse.Action):
    """``action=`` of ``--app``: stores MODULE:ATTR in ``app`` and, apart, in
    ``app_<const>`` (``before`` or ``after`` the command), which a subcommand's parse
    never overwrites, so that :func:`one_app` sees an app given on both sides."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_{self.const}", values)


def add_app_option(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """Add ``--app MODULE:ATTR`` to ``parser``: the top parser's (``top``: before the
    command, ``None`` by default) or a command's (after it: "not given" by default, so it
    never overwrites the app given before the command)."""
    parser.add_argument("--app", metavar="MODULE:ATTR", action=_Given,
                        const="before" if top else "after",
                        default=None if top else argparse.SUPPRESS,
                        help="your App, e.g. myapp:app: its store (unless --store), queues, "
                             "registered tasks (their queue, retry, timeout, delivery limit) "
                             "and periodic schedules")


def one_app(args: argparse.Namespace) -> None:
    """Set ``args.app`` to the app the command line names — ``--app`` before the command,
    after it, or ``tasks worker``'s APP — once it is given at most once (``None``: not
    given).

    Raises:
        InvalidInput: the app is given twice, even the same one.
    """
    named = {"--app before the command": getattr(args, "app_before", None),
             "APP": getattr(args, "worker_app", None),
             "--app after the command": getattr(args, "app_after", None)}
    given = [name for name, spec in named.items() if spec is not None]
    if len(given) > 1:
        raise InvalidInput(f"the app is given twice ({' and '.join(given)}): give it once")
    args.app = named[given[0]] if given else None
