"""``tasks submit --many FILE.jsonl``: one bulk submit (``App.submit_many``) of a JSON
object per line — ``task`` (default: the command's NAME), ``input``, ``key``, ``global``,
``queue``, ``delay`` (seconds, or ``"30s"``/``"5m"``…), ``at`` (an ISO 8601 instant with
a time zone) and ``priority``; blank lines are skipped. ``-`` reads standard input. UTF-8
line by line, a byte order mark before the first line ignored; read no further than the
first non-blank line past ``MAX_BATCH`` (the file is refused there).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

from tasks_core._json import parse_json
from tasks_core.cli._options import duration
from tasks_core.definitions import TaskDef
from tasks_core.durations import MAX_WAIT_S, parse_instant
from tasks_core.errors import InvalidInput
from tasks_core.items import SubmitItem
from tasks_core.rules import MAX_BATCH

__all__ = ["LINE_KEYS", "read_items"]

LINE_KEYS = frozenset({"task", "input", "key", "global", "queue", "delay", "at", "priority"})
"""What a line may hold."""


def read_items(
    path: str, default: str | None, task_of: Callable[[str, str | None], TaskDef | str]
) -> list[SubmitItem]:
    """The items of the file at ``path`` (``-``: standard input), each line read as it
    comes: decoded as UTF-8 on its own, then parsed; at the first non-blank line past
    ``MAX_BATCH`` (1000) the file is refused, read no further.

    Args:
        path: the file.
        default: the task of a line without ``task``.
        task_of: what to submit for a task name and the line's queue (the command's
            ``--app`` rules).

    Raises:
        InvalidInput: a file that cannot be read, one of more than 1000 items (naming
            it), or a bad line — not UTF-8, not an item — named by its number; nothing
            written.
    """
    name = "standard input" if path == "-" else repr(path)
    items: list[SubmitItem] = []
    for number, line in _lines(path, name):
        if not line.strip():
            continue
        if len(items) == MAX_BATCH:
            raise InvalidInput(f"--many: {name} holds more than {MAX_BATCH} items; split it")
        try:
            items.append(_item(parse_json(line, "the line"), default, task_of))
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and InvalidInput too
            message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise InvalidInput(f"line {number}: {message}") from None
    return items


def _lines(path: str, name: str) -> Iterator[tuple[int, str]]:
    """The lines of the file at ``path`` (``-``: standard input's bytes, whatever its
    text encoding) with their numbers from 1, read as they are asked for: each line ends at
    ``\\n`` (a ``\\r`` before it dropped), as JSON Lines says — a U+2028 or U+0085 inside a
    JSON string is part of it — and is decoded as UTF-8 on its own (the first without a
    byte order mark).

    Raises:
        InvalidInput: the file cannot be opened or read (naming it as ``name``), or a line
            is not UTF-8 (naming its number).
    """
    number = 0
    try:
        with nullcontext(sys.stdin.buffer) if path == "-" else open(path, "rb") as file:
            for chunk in file:
                try:
                    text = chunk.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InvalidInput(f"line {number + 1}: not UTF-8 (byte 0x"
                                       f"{chunk[exc.start]:02x} at byte {exc.start + 1} "
                                       "of the line)") from None
                if number == 0:  # the first line
                    text = text.removeprefix("\ufeff")
                number += 1  # (a raw U+2028 or U+0085 is text: only "\n" ends a line)
                yield number, text.removesuffix("\n").removesuffix("\r")
    except OSError as exc:
        raise InvalidInput(f"--many: cannot read {name}: {exc}") from None


def _item(
    value: Any, default: str | None, task_of: Callable[[str, str | None], TaskDef | str]
) -> SubmitItem:
    """One line as an item.

    Raises:
        InvalidInput: not an object, an unknown key, no task, a ``global`` that is not
            a boolean, a bad delay or instant, or both.
    """
    if not isinstance(value, dict):
        raise InvalidInput("each line must be a JSON object")
    unknown = sorted(set(value) - LINE_KEYS)
    if unknown:
        raise InvalidInput(f"unknown key(s) {', '.join(unknown)}; a line may hold "
                           f"{', '.join(sorted(LINE_KEYS))}")
    value = {key: given for key, given in value.items() if given is not None}  # null: absent
    name = value.get("task", default)
    if name is None:
        raise InvalidInput("name the task: a 'task' key, or the command's NAME")
    if not isinstance(name, str):
        raise InvalidInput("task must be a task name (a string)")
    global_key = value.get("global", False)
    if not isinstance(global_key, bool):
        raise InvalidInput("global must be true or false")
    if global_key and value.get("key") is None:  # the API's message would name dedup=
        raise InvalidInput("global applies to a key: give key, or leave global out")
    queue = value.get("queue")
    if "delay" in value and "at" in value:  # the API's message would name run_at
        raise InvalidInput("give delay or at, not both")
    delay = value.get("delay")
    if isinstance(delay, str):
        delay = duration(delay, "delay", high=MAX_WAIT_S, allow_zero=True)
    at = value.get("at")
    if at is not None and not isinstance(at, str):
        raise InvalidInput("at must be an ISO 8601 instant with a time zone")
    return SubmitItem(
        task_of(name, queue), value.get("input"), key=value.get("key"),
        dedup="global" if global_key else "owner", queue=queue,
        delay=delay, run_at=None if at is None else parse_instant(at, "at"),
        priority=value.get("priority"),
    )
