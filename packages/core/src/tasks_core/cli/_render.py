"""Rendering for the ``tasks`` CLI: tables and live progress bars (rich)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import TypeAdapter
from rich.console import Console, Group
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

from tasks_core._inert import inert
from tasks_core.events import EventRecord
from tasks_core.models import Instant, Snapshot, TaskStatus
from tasks_core.plugins import StoreSpec

__all__ = [
    "Bars",
    "backends_table",
    "cell",
    "history_table",
    "instant_json",
    "json_row",
    "one_line",
    "plain",
    "print_json",
    "short",
    "snapshot_table",
    "status_text",
    "summary_table",
    "tasks_table",
]

STATUS_STYLE = {
    TaskStatus.PENDING: "white",
    TaskStatus.SCHEDULED: "bright_black",
    TaskStatus.RUNNING: "cyan",
    TaskStatus.CLAIMED: "blue",
    TaskStatus.WAITING_INPUT: "magenta",
    TaskStatus.COMPLETED: "green",
    TaskStatus.FAILED: "red",
    TaskStatus.CANCELLED: "yellow",
}


def plain(value: object) -> str:
    """``value`` for a rich markup string: control characters escaped, markup inert — and
    printed exactly (on a console with emoji codes off: :func:`output_console`). Rich's
    ``escape`` doubles a single trailing backslash (lest it escape a tag that follows),
    which then prints twice: no line here puts a tag right after a value, so it is not
    (``test_no_markup_tag_follows_a_plain_value`` reads every CLI module for one)."""
    return escape(inert(value) + " ")[:-1]


SHOWN_OPTIONS = frozenset({
    "namespace", "driver", "w", "replicaset", "tls", "ssl", "sslmode", "connect_timeout",
    "authsource", "authmechanism", "readpreference", "directconnection",
})
"""The query options of a store URL whose value the CLI shows (names in any case); every
other option's value is ``***``: tokens, key passwords, whatever a driver adds."""


def shown_url(url: str) -> str:
    """A store URL as the CLI prints it (banners end up in logs): its password, and the
    value of every query option not in :data:`SHOWN_OPTIONS` (an option without a value
    whole), as ``***``; the rest as given. Text that is not a URL is shown as it is."""
    try:
        parts = urlsplit(url)
        hidden = parts.password is not None
    except ValueError:
        return url
    if hidden:
        userinfo, _, host = parts.netloc.rpartition("@")
        url = urlunsplit(parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{host}"))
    start, mark, rest = url.partition("?")
    if not mark:
        return url
    query, hash_mark, fragment = rest.partition("#")
    return f"{start}?{'&'.join(map(_shown_option, query.split('&')))}{hash_mark}{fragment}"


def _shown_option(option: str) -> str:
    name, equals, _ = option.partition("=")
    if name.lower() in SHOWN_OPTIONS:
        return option
    return f"{name}=***" if equals else "***"


PIPE_WIDTH = 10_000
"""The width tables are drawn at when stdout is not a terminal (and ``$COLUMNS`` is not
set): wide enough that no column is squeezed, wrapped or cut."""


def output_console() -> Console:
    """The console of a command's output: the terminal's width on a terminal; into a pipe
    or a file every table at its natural width, each row one line (rich would draw it at
    80 columns and wrap the ids, which scripts read whole); ``$COLUMNS`` still wins."""
    console = Console(emoji=False)
    if console.is_terminal or "COLUMNS" in os.environ:
        return console
    return Console(width=PIPE_WIDTH, emoji=False)


def one_line(console: Console, markup: str) -> None:
    """Print ``markup`` as one line, never wrapped or cropped, whatever the console's width:
    a result that scripts parse (``created: ID``) keeps its id whole. Rich otherwise wraps
    at the terminal width — 80 columns when the output is not a terminal. Build
    ``markup`` with :func:`plain` around stored text, which also escapes newlines."""
    console.print(markup, highlight=False, soft_wrap=True, emoji=False)


def print_json(console: Console, document: object) -> None:
    """Print ``document`` as one line of JSON for scripts (``--json``): not wrapped, no
    markup read and nothing highlighted. Rule: every character of it that is not printable
    (C0 and C1 controls, DEL, bidi and other format characters, line and paragraph
    separators) is written as its JSON escape (``\\u001b``, ``\\u009b``, ``\\u202e``; one
    outside the BMP as its surrogate pair), so stored text cannot drive the terminal; other
    non-ASCII text is written as it is. It loads back to the same document.

    Raises:
        TypeError, ValueError: ``document`` is not JSON (as ``json.dumps`` raises them).
    """
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    if not text.isprintable():  # only inside strings: the structure itself is printable
        text = "".join(ch if ch.isprintable() else json.dumps(ch)[1:-1] for ch in text)
    console.out(text, highlight=False)


_INSTANT = TypeAdapter(Instant)


def instant_json(value: datetime) -> str:
    """An instant as ``--json`` spells it: as a model's JSON spells an ``Instant``
    (``2026-12-07T03:51:42.420000Z``)."""
    return str(_INSTANT.dump_python(value, mode="json"))


def json_row(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with each instant spelled by :func:`instant_json` (``--json``)."""
    return {name: instant_json(value) if isinstance(value, datetime) else value
            for name, value in fields.items()}


def cell(value: object) -> Text:
    """``value`` as a table cell: literal text (never markup), control characters escaped."""
    if isinstance(value, Text):
        return value
    return Text(inert(value))


def status_text(status: TaskStatus) -> Text:
    """The status, coloured."""
    return Text(status.value, style=STATUS_STYLE.get(status, ""))


def short(value: Any, width: int | None = 48) -> str:
    """A one-line JSON rendering of ``value`` (runs of whitespace, newlines too, one space),
    cut to ``width`` characters with a trailing ``…``; ``width=None``: whole."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    text = " ".join(text.split())
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def _when(value: datetime | None) -> str:
    """An instant of the store (UTC) as the CLI prints it: to the millisecond, with its
    zone (``2026-12-06 18:06:49.986 UTC``; a naive one is UTC, as the store's are);
    ``—`` for none."""
    if value is None:
        return "—"
    instant = value.astimezone(UTC) if value.tzinfo is not None else value
    return f"{instant:%Y-%m-%d %H:%M:%S.%f}"[:-3] + " UTC"


def _progress(snapshot: Snapshot) -> str:
    if snapshot.progress is None:
        return "—"
    return f"{snapshot.progress.value:5.1f}%"


def _outcome(snapshot: Snapshot, width: int | None = 48) -> str:
    if snapshot.status == TaskStatus.COMPLETED:
        return short(snapshot.result, width)
    if snapshot.error is not None:
        return short(f"{snapshot.error.type}: {snapshot.error.message}", width)
    if snapshot.input_requests:
        return "asks: " + ", ".join(snapshot.input_requests)
    if snapshot.status == TaskStatus.SCHEDULED and snapshot.run_at is not None:
        return f"runs at {_when(snapshot.run_at)}"
    if snapshot.retry_at is not None and snapshot.last_failure is not None:
        return short(f"retry after {snapshot.last_failure.type}", width)
    if snapshot.progress is not None and snapshot.progress.message:
        return short(snapshot.progress.message, width)
    return ""


COLUMN_FLOOR = 6
"""The fewest characters a column of ``tasks ls`` other than the id and the outcome is cut
to before it is left out (one narrower than that is shown whole)."""

OUTCOME_FLOOR = 12
"""The fewest characters the OUTCOME column is cut to before it is left out."""

WHOLE = frozenset({"ID", "STATUS"})
"""The columns of ``tasks ls`` never cut: the id (scripts read it) and the status (a
status cut to ``compl…`` or ``cance…`` reads as a guess)."""

LEFT_OUT_FIRST = ("UPDATED", "OWNER", "DELIVERIES", "PRIORITY", "TRY", "PROGRESS", "QUEUE",
                  "TASK", "OUTCOME", "STATUS")
"""The order in which ``tasks ls`` leaves columns out when they do not fit at their floors
(the id never is)."""


def _shrunk(natural: dict[str, int], room: int) -> dict[str, int] | None:
    """The widths of the columns ``natural`` in ``room`` characters of cells, or None if
    they do not fit at their floors: :data:`WHOLE` columns at their natural widths; the
    outcome cut to the room left; if that is below its floor, the widest other column cut
    by one, again."""
    floors = {name: width if name in WHOLE else min(width, OUTCOME_FLOOR if name == "OUTCOME"
                                                   else COLUMN_FLOOR)
              for name, width in natural.items()}
    if sum(floors.values()) > room:
        return None
    widths = dict(natural)
    excess = sum(widths.values()) - room
    if excess > 0 and "OUTCOME" in widths:
        cut = min(excess, widths["OUTCOME"] - floors["OUTCOME"])
        widths["OUTCOME"] -= cut
        excess -= cut
    for _ in range(max(excess, 0)):
        widest = max((n for n in widths if widths[n] > floors[n]), key=lambda n: widths[n])
        widths[widest] -= 1
    return widths


def _fitted(natural: dict[str, int], width: int) -> dict[str, int]:
    """The columns of a boxed table that fit in ``width`` and their widths (3 characters a
    column of padding and border, plus 1): cut by :func:`_shrunk`, else left out in the
    order of :data:`LEFT_OUT_FIRST`; the id alone wider than that is folded."""
    shown = dict(natural)
    while (widths := _shrunk(shown, width - 3 * len(shown) - 1)) is None:
        if len(shown) == 1:
            return {"ID": max(1, width - 4)}
        del shown[next(name for name in LEFT_OUT_FIRST if name in shown)]
    return widths


def tasks_table(
    snapshots: Sequence[Snapshot], *, title: str | None = None, wide: bool = False,
    width: int | None = None,
) -> Table:
    """The ``tasks ls`` table (``wide``: priority, deliveries, owner and update time too),
    one line per task, the whole table (borders included) within ``width`` columns (None:
    natural width). Ids are whole, never wrapped or cut (scripts read them). The outcome is whole
    (one line, control characters escaped) when it fits, else cut with ``…`` to the room
    left; below :data:`OUTCOME_FLOOR` the other columns are cut (with ``…``) too, the widest
    first, down to :data:`COLUMN_FLOOR`; what still does not fit is left out (in the order
    of :data:`LEFT_OUT_FIRST`, named in the caption). Only a ``width`` narrower than an id
    and its borders folds the id, in a table of ids alone."""
    columns = ["ID", "TASK", "QUEUE", "STATUS", "PROGRESS", "TRY"]
    if wide:
        columns += ["PRIORITY", "DELIVERIES", "OWNER", "UPDATED"]
    columns.append("OUTCOME")
    rows: list[dict[str, Text]] = []
    for s in snapshots:
        values: list[Any] = [s.id, s.work.name, s.queue, status_text(s.status), _progress(s),
                             str(s.retry_count + 1)]
        if wide:
            values += [str(s.priority), str(s.deliveries), str(s.owner or "system"),
                       _when(s.updated_at)]
        values.append(_outcome(s, None))
        rows.append({name: cell(value) for name, value in zip(columns, values, strict=True)})
    natural = {name: max([len(name), *(row[name].cell_len for row in rows)])
               for name in columns}
    widths = natural if width is None else _fitted(natural, width)
    left_out = [name for name in columns if name not in widths]
    table = Table(title=title, header_style="bold", show_lines=False,
                  caption=f"left out, too narrow: {', '.join(left_out)}" if left_out else None)
    folded = "ID" in widths and widths["ID"] < natural["ID"]
    for name in widths:
        table.add_column(name, width=widths[name], no_wrap=not folded,
                         overflow="fold" if folded else "ellipsis")
    for row in rows:
        table.add_row(*(row[name] for name in widths))
    return table


def snapshot_table(s: Snapshot, now: datetime) -> Table:
    """Every field of one task that a person reads (``tasks show``), ``now`` the store's
    clock once it was read. The lease reads ``ended``, ``expired`` (lapsed at ``now``),
    ``held`` (live, claimed ahead of a free slot: the handler has not started) or ``live``
    (live otherwise: the task runs, or waits for input)."""
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    rows: list[tuple[str, Any]] = [
        ("id", s.id),
        ("task", s.work.name),
        ("status", status_text(s.status)),
        ("queue", s.queue),
        ("priority", str(s.priority)),
        ("tenant", s.tenant),
        ("owner", str(s.owner or "system")),
        ("watchers", ", ".join(str(w) for w in s.watchers) or "—"),
        ("run", s.run_id),
        ("revision", str(s.revision)),
        ("attempt", f"{s.retry_count + 1} of {s.work.retry_policy.attempts}"),
        ("deliveries", f"{s.deliveries} (limit {s.work.max_deliveries})"),
        ("progress", _progress(s) + (f"  {s.progress.message}" if s.progress and
                                     s.progress.message else "")),
        ("input", short(s.work.input, 200)),
        ("timeout", f"{s.work.timeout_s:g}s" if s.work.timeout_s else "—"),
    ]
    if s.input_requests:
        rows.append(("asks", short(s.input_requests, 200)))
    if s.accepted_input_responses:
        rows.append(("answers", short(s.accepted_input_responses, 200)))
    if s.status == TaskStatus.COMPLETED:
        rows.append(("result", short(s.result, 400)))
    if s.error is not None:
        rows.append(("error", f"{s.error.type}: {s.error.message}"))
    if s.cancel_reason is not None:
        rows.append(("cancel reason", s.cancel_reason.value))
    if s.run_at is not None:
        rows.append(("run at", _when(s.run_at)))
    if s.retry_at is not None:
        rows.append(("retry at", _when(s.retry_at)))
    if s.last_failure is not None and s.error is None:
        rows.append(("last failure", f"{s.last_failure.type}: {s.last_failure.message}"))
    if s.claim is not None:
        state = ("ended" if s.claim.ended else "expired" if not s.lease_live(now)
                 else "held" if s.claim.held else "live")
        took_over = "; took over an expired lease" if s.claim.recovered else ""
        rows.append(("lease", f"{s.claim.worker_id} gen {s.claim.generation} ({state}, "
                              f"until {_when(s.claim.expires_at)}{took_over})"))
    rows += [("created", _when(s.created_at)), ("started", _when(s.started_at)),
             ("finished", _when(s.finished_at)), ("expires", _when(s.expires_at))]
    for name, value in rows:
        table.add_row(name, cell(value))
    return table


def _detail(record: EventRecord) -> str:
    event = record.event.model_dump(mode="json", exclude={"event_id", "kind"})
    if record.retry_at is not None:
        event["retry_at"] = _when(record.retry_at)
    if record.error is not None and "error" not in event:
        event["error"] = f"{record.error.type}: {record.error.message}"
    if record.accepted is not None:  # answers: those accepted, and the keys ignored
        sent = event.get("responses", {})
        event["responses"] = {k: v for k, v in sent.items() if k in record.accepted}
        event["ignored"] = [k for k in sent if k not in record.accepted] or None
    return short({k: v for k, v in event.items() if v not in (None, "")}, 160)


def history_table(records: Iterable[EventRecord]) -> Table:
    """The event history of one task."""
    table = Table(title="history", header_style="bold")
    for column in ("REV", "COMMITTED", "EVENT", "STATUS", "DETAIL"):
        table.add_column(column, overflow="fold", no_wrap=column in ("REV", "COMMITTED"))
    for r in records:
        table.add_row(str(r.revision), _when(r.committed_at)[11:], r.kind,
                      status_text(r.status), cell(_detail(r)))
    return table


def backends_table(specs: Sequence[StoreSpec], default_url: str) -> Table:
    """Installed store plugins and their capabilities."""
    table = Table(title=f"store plugins (default store: {plain(default_url)})",
                  header_style="bold")
    for column in ("NAME", "SCHEMES", "DISTRIBUTION", "DURABLE", "MULTI-PROCESS", "WAKEUPS",
                   "EXCLUSIVE QUEUES"):
        table.add_column(column)
    for spec in specs:
        caps = spec.capabilities
        table.add_row(spec.name, ", ".join(spec.schemes), spec.distribution,
                      *("yes" if flag else "no" for flag in (caps.durable, caps.multi_process,
                                                              caps.wakeups,
                                                              caps.exclusive_queues)))
    return table


def summary_table(snapshots: Sequence[Snapshot], labels: dict[str, str]) -> Table:
    """The demo's closing table: what happened to each task."""
    table = Table(title="summary", header_style="bold")
    for column in ("TASK", "STATUS", "ATTEMPTS", "DELIVERIES", "OUTCOME", "ID"):
        table.add_column(column, overflow="fold" if column == "ID" else "ellipsis")
    for s in snapshots:
        table.add_row(cell(labels.get(s.id, s.work.name)), status_text(s.status),
                      str(s.retry_count + 1), str(s.deliveries), cell(_outcome(s)), cell(s.id))
    return table


class Bars:
    """Live progress bars, one per task, fed with snapshots."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("{task.description}", justify="left", markup=False),
            BarColumn(bar_width=30),
            TaskProgressColumn(),
            TextColumn("{task.fields[status]}"),
            TextColumn("{task.fields[note]}", style="dim", markup=False),
            console=console,
            auto_refresh=False,
        )
        self._rows: dict[str, TaskID] = {}

    def update(self, snapshot: Snapshot, label: str | None = None) -> None:
        """Show ``snapshot`` on its bar (added on first sight)."""
        value = snapshot.progress.value if snapshot.progress else 0.0
        if snapshot.status == TaskStatus.COMPLETED:
            value = 100.0
        style = STATUS_STYLE.get(snapshot.status, "")
        status = f"[{style}]{snapshot.status.value}[/]"
        note = inert(_outcome(snapshot))
        row = self._rows.get(snapshot.id)
        if row is None:
            self._rows[snapshot.id] = self.progress.add_task(
                inert(label or snapshot.work.name), total=100, completed=round(value),
                status=status, note=note,
            )
        else:
            self.progress.update(row, completed=round(value), status=status, note=note)

    def renderable(self) -> Group:
        """What a ``rich.live.Live`` shows."""
        return Group(self.progress)
