"""Stored text shown to a person — a terminal, a log line — never acts on what shows it.

Rule: every character that is not printable (control characters, line breaks, bidi
overrides) is shown as its escape (``\\x1b``, ``\\n``, ``\\u202e``); printable text is
kept as it is. The CLI prints stored text through it, and the runtime's log lines put a
handler's error text through it, so a message cannot forge a log line or drive a terminal.
"""

from __future__ import annotations

__all__ = ["inert"]


def inert(text: object) -> str:
    """``str(text)`` with every character that is not printable shown as its escape."""
    shown = str(text)
    if shown.isprintable():
        return shown
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in shown)
