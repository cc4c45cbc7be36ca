"""The numeric options of ``tasks``: argparse reads the number a text spells in ASCII —
an integer ``[+-]digits``; a duration also a point, an exponent, ``nan``, ``inf`` and a unit
``s``, ``m``, ``h`` or ``d`` (:func:`seconds`, the one grammar of every duration the CLI
reads) — and never judges it (``nan``, ``1e308``, ``-5`` and ``0`` all reach a check); any
other text (``٣``, ``1_000``, white space: Python's ``int()`` reads them) is refused naming
the option. Each is then checked once, in the one check of its kind, before the command
reads, writes or starts anything: a size by :func:`tasks_core.rules.check_limit`, a duration
by :func:`tasks_core.durations.check_duration` (``InvalidInput``: one line, exit 2), a
duration's refusal quoting the text as typed (:func:`as_typed`). Options an API call takes
are checked there (``tasks worker``'s by ``Worker``, ``submit --priority`` by
``App.submit``); :func:`check_options` checks the rest, right after parsing.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from typing import Any

from tasks_core.durations import MAX_WAIT_S, check_duration
from tasks_core.errors import InvalidInput
from tasks_core.runtime.worker import check_worker_lease
from tasks_core.sizes import MAX_PORT, check_limit

__all__ = ["MAX_PAGE", "MAX_PORT", "MAX_PROCESSES", "MAX_ROUNDS", "MAX_SCAN", "SIZES",
           "Seconds", "as_typed", "check_arguments", "check_options", "duration", "number",
           "seconds", "typed"]

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


_INTEGER = re.compile(r"[+-]?[0-9]+")
_REAL = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                   r"|inf|infinity|nan)", re.ASCII | re.IGNORECASE)


TOO_LONG = "an integer too long to read"
"""The refusal of an integer past Python's digit limit (``int()`` refuses it)."""


def _spelled(text: str) -> int | float | None:
    """The number ``text`` spells in ASCII (see :func:`number`), or ``None``.

    Raises:
        argparse.ArgumentTypeError: an integer past Python's digit limit.
    """
    if _INTEGER.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # past Python's digit limit
            raise argparse.ArgumentTypeError(TOO_LONG) from None
    if _REAL.fullmatch(text):
        return float(text)
    return None


def _spelling(what: str, text: str) -> str:
    """What ``text`` should have spelled, ``what``, saying "in ASCII digits" when it holds
    other characters (another script's digits look right and are not read)."""
    return what if text.isascii() else f"{what} in ASCII digits (0-9)"


def _unreadable(text: str, what: str) -> argparse.ArgumentTypeError:
    """The refusal of ``text``, which does not spell ``what``."""
    return argparse.ArgumentTypeError(f"not {_spelling(what, text)}: {text!r}")


def number(text: str) -> int | float:
    """The argparse ``type`` of every numeric option: the number ``text`` spells in ASCII,
    an ``int`` when it is an integer (``5``, ``-5``, ``+5``, ``99999999999``), else a
    ``float`` (``2.5``, ``.5``, ``nan``, ``inf``, ``1e308``), for the option's check to
    judge.

    Raises:
        argparse.ArgumentTypeError: anything else — another script's digits (``٣``), an
            underscore, white space (argparse's usage error, naming the option).
    """
    value = _spelled(text)
    if value is None:
        raise _unreadable(text, "a number")
    return value


UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
"""The units a duration may be written in, and their seconds."""

DURATION_SPELLING = "a number of seconds or a number with a unit s, m, h or d (e.g. 30s, 5m)"
"""What a duration option takes, as refusals say it."""


def seconds(text: str) -> int | float:
    """The one grammar of a duration written on the command line (every duration option,
    ``submit --delay``, a ``--many`` line's ``delay``): a number as :func:`number` reads it
    (``30``, ``1.5``, ``1e3``, ``nan``…), optionally followed by a unit ``s``, ``m``,
    ``h`` or ``d`` (``30s``, ``1.5m``, ``2h``, ``1d``); its seconds, never judged (the
    option's check does that: ``-5s``, ``nan`` and ``8d`` are read).

    Raises:
        argparse.ArgumentTypeError: anything else — another script's digits (``٣s``),
            white space (`` 30s``, ``30 s``), an unknown or upper-case unit (``30S``).
    """
    factor = UNITS.get(text[-1:])
    value = _spelled(text[:-1] if factor else text)
    if value is None:
        raise _unreadable(text, DURATION_SPELLING)
    return value * (factor or 1)


class Seconds(argparse.Action):
    """``action=`` of a duration option (``--lease``, ``--timeout``…): stores the seconds
    :func:`seconds` reads in the text (``30``, ``30s``, ``1.5m``…), and keeps the text as
    typed for a refusal to quote (:func:`typed`).

    Raises:
        argparse.ArgumentError: not a duration :func:`seconds` reads (argparse's usage
            error, naming the option).
    """

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        text = str(values)
        try:
            setattr(namespace, self.dest, seconds(text))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        namespace.typed = {**getattr(namespace, "typed", {}), self.dest: text}


def typed(args: argparse.Namespace, dest: str) -> str | None:
    """The text typed for the :class:`Seconds` option stored in ``dest`` (``None``: not
    given)."""
    texts: dict[str, str] = getattr(args, "typed", {})
    return texts.get(dest)


def as_typed(refusal: InvalidInput, text: str | None, option: str,
             named: str | None = None) -> InvalidInput:
    """``refusal`` — the one check's refusal of the value an option's ``text`` spells —
    worded for the command line: the same rule and range, the value quoted as typed
    (``--delay must be in [0, 31622400] seconds, not '367d'``: not the seconds it reads
    as), and, when the check names the API's argument ``named``, the option before it
    (``--lease (lease_for) must be in …``)."""
    message = str(refusal)
    quoted = f"not {text!r}"
    if text is not None and not message.endswith(quoted):  # a grammar refusal quotes it
        head, sep, _ = message.rpartition(", not ")
        message = f"{head}, {quoted}" if sep else f"{option} {text!r}: {message}"
    if named is not None and message.startswith(f"{named} "):
        message = f"{option} ({named}){message[len(named):]}"
    return InvalidInput(message)


def duration(text: str, what: str, *, high: float, allow_zero: bool = False) -> float:
    """A duration written as text (``submit --delay``, a ``--many`` line's ``delay``): read
    by :func:`seconds` and checked by :func:`tasks_core.durations.check_duration` (at
    most ``high``, not negative; zero only with ``allow_zero``), a refusal quoting ``text``
    as typed (:func:`as_typed`).

    Raises:
        InvalidInput: naming ``what``: not such a text (ASCII digits only), or out of range.
    """
    try:
        given = seconds(text)
    except argparse.ArgumentTypeError as exc:
        if str(exc) == TOO_LONG:
            raise InvalidInput(f"{what}: {TOO_LONG}") from None
        raise InvalidInput(f"{what} must be {_spelling(DURATION_SPELLING, text)}, "
                           f"not {text!r}") from None
    try:
        return check_duration(given, what, high=high, allow_zero=allow_zero)
    except InvalidInput as exc:
        raise as_typed(exc, text, what) from None


def _checked(args: argparse.Namespace, dest: str, option: str,
             check: Callable[[object], float | None]) -> float | None:
    """``check`` of the :class:`Seconds` option in ``dest``, its refusal quoting the text.

    Raises:
        InvalidInput: ``check``'s refusal, worded by :func:`as_typed`.
    """
    try:
        return check(getattr(args, dest))
    except InvalidInput as exc:
        raise as_typed(exc, typed(args, dest), option) from None


def check_arguments(argv: Sequence[str]) -> None:
    """Refuse an argument that is not UTF-8: Python hands its bytes on as lone surrogates
    (``surrogateescape``), which a later check would call "not valid Unicode" — text the
    user never typed.

    Raises:
        InvalidInput: naming the argument (its position), the byte and where it is.
    """
    for position, argument in enumerate(argv, start=1):
        try:
            argument.encode("utf-8")
        except UnicodeEncodeError as exc:
            code = ord(argument[exc.start])
            at = len(argument[:exc.start].encode()) + 1  # the first bad character
            what = (f"byte 0x{code - 0xDC00:02x} at byte {at} of it" if 0xDC80 <= code <= 0xDCFF
                    else f"a lone surrogate at character {exc.start + 1}")
            raise InvalidInput(f"argument {position} is not UTF-8 ({what})") from None


def check_options(args: argparse.Namespace) -> None:
    """Check the numeric options of ``args.command`` that no API call checks, replacing
    each by its checked value, before anything is read, written or started.

    Raises:
        InvalidInput: naming the option, with its bounds and the value given (a
            duration's as typed).
    """
    for attribute, option, smallest, largest in SIZES.get(args.command, ()):
        value = getattr(args, attribute, None)
        if value is not None:
            setattr(args, attribute, check_limit(value, minimum=smallest, maximum=largest,
                                                 what=option))
    if args.command == "workers" and args.lease is not None:
        args.lease = _checked(args, "lease", "--lease",
                              lambda value: check_worker_lease(value, "--lease"))
    if args.command == "stress":
        args.timeout = _checked(args, "timeout", "--timeout", lambda value: check_duration(
            value, "--timeout", high=MAX_WAIT_S, allow_none=True))
