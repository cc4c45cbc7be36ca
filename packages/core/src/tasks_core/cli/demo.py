"""``tasks demo``: a batch of tasks and a worker in one process, drawn live.

In a few seconds: three reports with progress bars (``async def``, side by side); a flaky
sync handler retried by the store's ``retry_at`` until it completes; an export that
exceeds its ``timeout`` (``failed``/``TaskTimeout``); an import cancelled halfway; a payout
that asks for approval, is parked, answered, and re-run with the stored answer (2
deliveries); a reminder delayed 3 s (``scheduled`` until the store's clock reaches it).
It ends with a summary table and leaves its tasks in the store (kept a day) for ``tasks
ls`` and ``tasks show`` when the store is durable.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.live import Live

from tasks_core.authority import Owner
from tasks_core.cli._render import Bars, plain, shown_url, summary_table
from tasks_core.context import TaskContext
from tasks_core.definitions import Queue, TaskDef
from tasks_core.models import RetryPolicy, Snapshot, TaskStatus
from tasks_core.runtime._defaults import EMBEDDED_STORE_URL, default_store_url, installed
from tasks_core.runtime.app import App
from tasks_core.runtime.worker import Worker

__all__ = ["DEMO_OWNER", "build_demo_app", "run_demo"]

DEMO_OWNER = Owner("demo")
DEADLINE_S = 50.0
KEPT_S = 86400.0
"""How long the demo's tasks stay in the store: a finished one for its retention, one an
interrupted demo left unfinished until its ttl ends (neither outlives a day)."""


def build_demo_app(url: str) -> App:
    """A fresh App with the demo's tasks, on ``url``."""
    app = App(url, queues=[Queue("demo")], retention=KEPT_S)

    @app.task(queue="demo")
    async def render_report(ctx: TaskContext, pages: int) -> dict[str, Any]:
        for page in range(1, pages + 1):
            await ctx.sleep(0.25)
            ctx.progress(100 * page / pages, f"page {page}/{pages}")
        return {"pages": pages}

    @app.task(queue="demo", retry=RetryPolicy.fixed(0.5, attempts=3))
    def sync_flaky_fetch(ctx: TaskContext, failures: int) -> dict[str, Any]:
        for step in range(1, 5):
            time.sleep(0.1)
            ctx.raise_if_cancelled()
            ctx.progress(25 * step, f"attempt {ctx.attempt}")
        if ctx.attempt <= failures:
            raise ConnectionError(f"upstream refused the connection (attempt {ctx.attempt})")
        return {"attempts": ctx.attempt}

    @app.task(queue="demo", timeout=1.5)
    async def slow_export(ctx: TaskContext, rows: int) -> dict[str, Any]:
        for row in range(rows):
            await ctx.sleep(0.1)
            ctx.progress(100 * (row + 1) / rows, f"row {row + 1}/{rows}")
        return {"rows": rows}

    @app.task(queue="demo")
    async def long_import(ctx: TaskContext, batches: int) -> dict[str, Any]:
        for batch in range(batches):
            await ctx.sleep(0.2)
            ctx.progress(100 * (batch + 1) / batches, f"batch {batch + 1}/{batches}")
        return {"batches": batches}

    @app.task(queue="demo")
    async def approve_payout(ctx: TaskContext, amount: int) -> dict[str, Any]:
        ctx.progress(10, "waiting for approval")
        answer = await ctx.request_input("approve", {"question": f"Pay out {amount} EUR?"})
        if not isinstance(answer, dict) or not answer.get("ok"):
            return {"paid": 0}
        for step in range(2, 11):
            await ctx.sleep(0.1)
            ctx.progress(10 * step, "paying")
        return {"paid": amount, "approved_by": answer.get("by")}

    @app.task(queue="demo")
    async def send_reminder(ctx: TaskContext, to: str) -> dict[str, Any]:
        ctx.progress(100, f"reminded {to}")
        return {"reminded": to}

    return app


@dataclass
class _Item:
    label: str
    task: str
    input: dict[str, Any]
    expect: TaskStatus
    delay: float | None = None
    id: str = ""


async def run_demo(url: str | None = None, *, console: Console | None = None) -> int:
    """Run the demo on ``url`` (default: the default store). Returns 0 when every task
    ended as the demo expects."""
    console = console or Console()
    if url is None:
        url, why = default_store_url()
    else:
        why = "from --store" if url != default_store_url()[0] else default_store_url()[1]
    app = build_demo_app(url)
    items = [
        _Item("report: january", "render_report", {"pages": 6}, TaskStatus.COMPLETED),
        _Item("report: february", "render_report", {"pages": 10}, TaskStatus.COMPLETED),
        _Item("report: march", "render_report", {"pages": 14}, TaskStatus.COMPLETED),
        _Item("flaky fetch (sync, retried)", "sync_flaky_fetch", {"failures": 2},
              TaskStatus.COMPLETED),
        _Item("export (timeout 1.5s)", "slow_export", {"rows": 60}, TaskStatus.FAILED),
        _Item("import (cancelled)", "long_import", {"batches": 30}, TaskStatus.CANCELLED),
        _Item("payout (asks approval)", "approve_payout", {"amount": 120},
              TaskStatus.COMPLETED),
        _Item("reminder (delayed 3s)", "send_reminder", {"to": "ops"}, TaskStatus.COMPLETED,
              delay=3.0),
    ]
    console.print(f"[bold]tasks demo[/] — store [cyan]{plain(shown_url(url))} [/]({why})",
                  highlight=False)
    started = time.monotonic()
    async with app:
        batch = secrets.token_hex(3)
        tasks: dict[str, TaskDef] = app.tasks
        for number, item in enumerate(items, 1):
            submitted = await app.submit(tasks[item.task], item.input, DEMO_OWNER,
                                         key=f"demo-{batch}-{number}", delay=item.delay,
                                         ttl=KEPT_S)
            item.id = submitted.id
        labels = {item.id: item.label for item in items}
        worker = Worker(app, concurrency=8, lease_for=10.0, input_park=0.8,
                        poll_interval=0.2, progress_interval=0.1, reap_interval=None)
        async with worker:
            snapshots = await _drive(app, items, labels, console)
    if not console.is_terminal:
        console.line()  # off a terminal the last frame ends without one
    console.print(summary_table(snapshots, labels))
    ok = all(s.status == item.expect for s, item in zip(snapshots, items, strict=True))
    console.print(f"finished in {time.monotonic() - started:.1f}s — "
                  + ("[green]every task ended as expected[/]" if ok
                     else "[red]some tasks did not end as expected[/]"))
    _hints(console, url, items)
    return 0 if ok else 1


async def _drive(
    app: App, items: list[_Item], labels: dict[str, str], console: Console
) -> list[Snapshot]:
    """Refresh the bars, cancel the import halfway, answer the approval late."""
    bars = Bars(console)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    asked_at: float | None = None
    cancelled = answered = False
    importer = next(i.id for i in items if i.task == "long_import")
    payout = next(i.id for i in items if i.task == "approve_payout")
    snapshots: list[Snapshot] = []
    with Live(bars.renderable(), console=console, refresh_per_second=12) as live:
        while True:
            snapshots = [await app.get(item.id, DEMO_OWNER) for item in items]
            for snapshot in snapshots:
                bars.update(snapshot, labels[snapshot.id])
            live.update(bars.renderable(), refresh=True)
            by_id = {s.id: s for s in snapshots}
            progress = by_id[importer].progress
            if not cancelled and progress is not None and progress.value >= 30:
                await app.cancel(importer, DEMO_OWNER)
                cancelled = True
            if by_id[payout].status == TaskStatus.WAITING_INPUT and not answered:
                asked_at = asked_at or loop.time()
                if loop.time() - asked_at >= 1.5:  # past the park: the slot is free again
                    await app.respond(payout, {"approve": {"ok": True, "by": "demo-manager"}},
                                      DEMO_OWNER)
                    answered = True
            if all(s.terminal for s in snapshots) or loop.time() > deadline:
                return snapshots
            await asyncio.sleep(0.08)


def _hints(console: Console, url: str, items: list[_Item]) -> None:
    if url.startswith("memory://"):
        keep = (f"Run it on {EMBEDDED_STORE_URL} (the default)" if installed(EMBEDDED_STORE_URL)
                else f"Install tasks-store-sql and the demo keeps them in {EMBEDDED_STORE_URL}")
        console.print(f"[dim]The memory:// store lived in this process only. {keep} for "
                      "`tasks ls` and `tasks show`.[/]")
        return
    store = f" --store {plain(shown_url(url))}" if url != default_store_url()[0] else ""
    console.print("Inspect them:", highlight=False)
    console.print(f"  tasks ls --system{store}", highlight=False)
    payout = next(item.id for item in items if item.task == "approve_payout")
    console.print(f"  tasks show --system {payout}{store}", highlight=False)
