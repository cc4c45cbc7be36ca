"""The numeric options of ``tasks``: argparse reads the number a text spells and never
judges it (``nan``, ``1e308``, ``-5`` and ``0`` all reach a check); each is then checked
once, in the one check of its kind, before the command reads, writes or starts anything:
a size by :func:`tasks_core.rules.check_limit`, a duration by
:func:`tasks_core.durations.check_duration`, the refusal naming the option
(``InvalidInput``: one line, exit 2). Options an API call takes are checked there
(``tasks worker``'s by ``Worker``, ``submit --priority`` by ``App.submit``);
:func:`check_options` checks the rest, right after parsing.
"""

from __future__ import annotations

import argparse

from tasks_core.durations import MAX_WAIT_S, check_duration
from tasks_core.runtime.worker import check_worker_lease
from tasks_core.sizes import MAX_PORT, check_limit

__all__ = ["MAX_PAGE", "MAX_PORT", "MAX_PROCESSES", "MAX_ROUNDS", "MAX_SCAN", "SIZES",
           "check_options", "number"]

MAX_PAGE = 1000
"""The largest page: ``App.list``'s, and so the largest ``ls --limit``."""
MAX_SCAN = 100_000
"""The most tasks ``ls --scan`` reads and ``reap --limit`` deletes, and the largest
``stress --tasks``."""
MAX_ROUNDS = 1000
"""The most ``stress --rounds``."""
MAX_PROCESSES = 256
"""The most processes ``stress --writers`` or ``--workers`` starts."""

SIZES: dict[str, tuple[tuple[str, str, int, int], ...]] = {
    "ls": (("limit", "--limit", 1, MAX_PAGE), ("scan", "--scan", 1, MAX_SCAN)),
    "reap": (("limit", "--limit", 1, MAX_SCAN),),
    "stress": (("tasks", "--tasks", 1, MAX_SCAN), ("rounds", "--rounds", 1, MAX_ROUNDS),
               ("writers", "--writers", 2, MAX_PROCESSES),
               ("workers", "--workers", 1, MAX_PROCESSES)),
    "dashboard": (("port", "--port", 1, MAX_PORT),),
    "worker": (("metrics_port", "--metrics-port", 0, MAX_PORT),),  # 0: any free port
}
"""Per command, its sizes only the CLI takes: ``(attribute, option, smallest,
largest)``; each is an integer in that range (``None``: not given)."""


def number(text: str) -> int | float:
    """The argparse ``type`` of every numeric option: the number ``text`` spells, an
    ``int`` when it is an integer (``5``, ``-5``, ``99999999999``), else a ``float``
    (``2.5``, ``nan``, ``inf``, ``1e308``), for the option's check to judge.

    Raises:
        argparse.ArgumentTypeError: not a number at all (argparse's usage error).
    """
    try:
        return int(text)
    except ValueError:
        if text.strip().lstrip("+-").isdigit():  # past Python's digit limit
            raise argparse.ArgumentTypeError("an integer too long to read") from None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def check_options(args: argparse.Namespace) -> None:
    """Check the numeric options of ``args.command`` that no API call checks, replacing
    each by its checked value, before anything is read, written or started.

    Raises:
        InvalidInput: naming the option, with its bounds and the value given.
    """
    for attribute, option, smallest, largest in SIZES.get(args.command, ()):
        value = getattr(args, attribute, None)
        if value is not None:
            setattr(args, attribute, check_limit(value, minimum=smallest, maximum=largest,
                                                 what=option))
    if args.command == "workers" and args.lease is not None:
        args.lease = check_worker_lease(args.lease, "--lease")
    if args.command == "stress":
        args.timeout = check_duration(args.timeout, "--timeout", high=MAX_WAIT_S,
                                      allow_none=True)
