"""MongoDB against PostgreSQL, the write concern on and off (run by ``bench.py``, last;
``--mongo``: only this).

Three stores in each of ``--rounds`` rounds, the order rotating from round to round:
PostgreSQL (the SQL store on ``--postgres-url``), MongoDB with the store's default write
concern (``{w: "majority", j: true}``) and MongoDB relaxed (``?w=1&journal=false``), both
on ``--mongo-url`` (``nox -s bench`` starts the pinned SecantusDB on disk for it; empty:
this stage is skipped). For each, in a fresh namespace dropped afterwards:

- ``submit``: ``app.submit`` one after another (``--mongo-serial``, after ``WARM`` untimed);
- ``submit_many``: ``app.submit_many`` of ``MANY`` items at a time (``--mongo-bulk``);
- ``burn-down``: those tasks run by one ``Worker`` (``--concurrency``, ``--prefetch``) on
  a store opened afresh, until its drain returned; then checked (every task completed
  once, its completion in its history);
- ``start latency``: an idle worker while a second ``App`` with a store of its own submits
  ``--mongo-samples`` tasks at ``--mongo-rate``/s: ms from the call of ``submit`` to the
  handler's start (p50/p90/p99).

Reported per round, then as medians: each MongoDB figure as a ratio to PostgreSQL's of
the same round, and the default concern's to the relaxed one's (the concern's cost). The
test server is slow (SecantusDB is Python), so counts are small and the ratios are about
this server, not about a genuine ``mongod``. A benchmark, never a test: nothing here
asserts a speed.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import time
from typing import Any

from bench import OWNER, Probe, burn_down, check, in_process, latency, make_app
from tasks_core import App, SubmitItem, TaskStore, open_store

__all__ = ["add_arguments", "render", "run"]

MANY = 100
"""Items per ``submit_many`` call."""
WARM = 10
"""Submits before the timed ones (connections, first statements), burnt down with them."""
RELAXED = "w=1&journal=false"
RATES = ("submit", "submit_many", "burn_down")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This stage's options on ``bench.py``'s parser."""
    parser.add_argument("--mongo", action="store_true", help="only MongoDB against PostgreSQL")
    parser.add_argument("--mongo-url", default="",
                        help="MongoDB server (mongodb://host:port/); empty: stage skipped")
    parser.add_argument("--mongo-serial", type=int, default=100,
                        help="MongoDB stage: app.submit one after another, per store")
    parser.add_argument("--mongo-bulk", type=int, default=300,
                        help=f"MongoDB stage: tasks by submit_many of {MANY}, per store")
    parser.add_argument("--mongo-samples", type=int, default=50,
                        help="MongoDB stage: start-latency tasks per store")
    parser.add_argument("--mongo-rate", type=float, default=20.0,
                        help="MongoDB stage: start-latency submits per second")


def _stores(args: argparse.Namespace) -> dict[str, str]:
    """The URL of each store measured (PostgreSQL's only when it is among ``--stores``)."""
    head, _, query = args.mongo_url.partition("?")
    base = head.rstrip("/")
    if base.count("/") > 2:  # the URL names a database: ours replaces it
        base = base.rsplit("/", 1)[0]
    join = "&".join
    stores = {}
    if "postgresql" in args.stores:
        stores["postgresql"] = args.postgres_url
    stores["mongodb"] = f"{base}/tasks_bench?{join(p for p in (query, 'driver=pymongo') if p)}"
    stores["mongodb w=1"] = f"{stores['mongodb']}&{RELAXED}"
    return stores


async def _drop(url: str, namespace: str) -> None:
    if url.startswith("mongodb"):
        from tasks_store_mongo.plugin import drop_namespace as drop_mongo

        await drop_mongo(url, namespace)
    else:
        from tasks_store_sql.plugin import drop_namespace as drop_sql

        await drop_sql(url, namespace)


async def _open(url: str, namespace: str) -> TaskStore:
    store: TaskStore = await open_store(url, namespace=namespace)
    return store


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of the module docstring for the store of ``url``."""
    namespace = "mb_" + secrets.token_hex(3)
    probe = Probe()
    figures: dict[str, Any] = {}
    try:
        store = await _open(url, namespace)
        try:
            app = make_app(store, probe)
            for _ in range(WARM):
                await app.submit("noop", None, OWNER)
            started = time.perf_counter()
            for _ in range(args.mongo_serial):
                await app.submit("noop", None, OWNER)
            figures["submit"] = args.mongo_serial / (time.perf_counter() - started)
            figures["submit_many"] = await _submit_many(app, args.mongo_bulk)
        finally:
            await store.aclose()
        total = WARM + args.mongo_serial + args.mongo_bulk
        store = await _open(url, namespace)
        try:
            figures["burn_down"] = await burn_down(make_app(store, probe), probe, total,
                                                   args.concurrency, args.prefetch)
            figures["checked"] = await check(store, total)
        finally:
            await store.aclose()
        worker, submitter = await _open(url, namespace), await _open(url, namespace)
        try:
            figures["latency_ms"] = await latency(
                make_app(worker, probe),
                in_process(make_app(submitter, probe), args.mongo_rate, args.mongo_samples),
                probe, args.mongo_rate, args.mongo_samples, args.concurrency,
            )
        finally:
            await submitter.aclose()
            await worker.aclose()
    finally:
        await _drop(url, namespace)
    return figures


async def _submit_many(app: App, count: int) -> float:
    """Tasks/s of ``app.submit_many`` of :data:`MANY` items per call."""
    started = time.perf_counter()
    for first in range(0, count, MANY):
        items = [SubmitItem(task="noop") for _ in range(min(MANY, count - first))]
        await app.submit_many(items, OWNER)
    return count / (time.perf_counter() - started)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """``--rounds`` rounds of every store, the order rotating; per round the figures and
    the ratios; their medians."""
    if not args.mongo_url:
        return {"skipped": "no --mongo-url (nox -s bench starts SecantusDB for it)"}
    stores = _stores(args)
    names = list(stores)
    rounds = []
    for n in range(args.rounds):
        order = names[n % len(names):] + names[:n % len(names)]
        figures = {name: await measure(stores[name], args) for name in order}
        rounds.append({"order": order, "stores": _rounded(figures),
                       "ratios": _ratios(figures)})
    keys = rounds[0]["ratios"].keys()
    medians = {k: round(statistics.median(r["ratios"][k] for r in rounds), 3) for k in keys}
    return {"serial": args.mongo_serial, "bulk": args.mongo_bulk, "many": MANY,
            "samples": args.mongo_samples, "rate": args.mongo_rate,
            "urls": {k: v.replace(args.mongo_url.split("?")[0].rstrip("/"), "…")
                     for k, v in stores.items()},
            "rounds": rounds, "medians": medians}


def _rounded(figures: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, f in figures.items():
        out[name] = {k: round(f[k], 1) for k in RATES}
        out[name]["latency_ms"] = {k: round(v, 1) for k, v in f["latency_ms"].items()}
        out[name]["checked"] = f["checked"]
    return out


def _ratios(figures: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Rates as ``a / b`` (above 1: ``a`` faster), latency p50 as ``a / b`` (above 1:
    ``a`` slower), for MongoDB against PostgreSQL and the default concern against the
    relaxed one."""
    pairs = [("mongodb", "mongodb w=1")]
    if "postgresql" in figures:
        pairs = [("mongodb", "postgresql"), ("mongodb w=1", "postgresql"), *pairs]
    ratios = {}
    for a, b in pairs:
        for k in RATES:
            ratios[f"{k}: {a} / {b}"] = round(figures[a][k] / figures[b][k], 3)
        p50 = figures[a]["latency_ms"]["p50"] / figures[b]["latency_ms"]["p50"]
        ratios[f"latency p50: {a} / {b}"] = round(p50, 3)
    return ratios


def render(report: dict[str, Any]) -> list[str]:
    """The stage's lines for ``bench.py``'s table."""
    if "skipped" in report:
        return [f"MongoDB against PostgreSQL: skipped — {report['skipped']}"]
    lines = [f"MongoDB against PostgreSQL (submit {report['serial']} one by one, submit_many "
             f"{report['bulk']} by {report['many']}, burn-down of both, start latency "
             f"{report['samples']} at {report['rate']:g}/s; rates /s, latency ms p50/p90/p99):"]
    for n, r in enumerate(report["rounds"], 1):
        lines.append(f"  round {n} (order: {', '.join(r['order'])})")
        for name, f in r["stores"].items():
            lat = "/".join(f"{f['latency_ms'][k]:.0f}" for k in ("p50", "p90", "p99"))
            lines.append(f"    {name:<12} submit {f['submit']:>7.0f}  submit_many "
                         f"{f['submit_many']:>7.0f}  burn-down {f['burn_down']:>7.0f}  "
                         f"latency {lat}")
    lines.append("  ratios per round → median:")
    for key, median in report["medians"].items():
        per = " ".join(f"{r['ratios'][key]:.3f}" for r in report["rounds"])
        lines.append(f"    {key:<44} {per} → {median:.3f}")
    return lines
