"""Telemetry's cost on the hot path: the burn-down of bench.py with telemetry off and on,
alternating in one run (each round a fresh namespace, submitted then burnt down by a
store opened afresh, as bench.py's PostgreSQL rounds).

"On" is ``telemetry.enable`` with the OpenTelemetry SDK: a tracer provider whose spans go
to a batch processor over an in-memory exporter, and a meter provider with an in-memory
reader (what an application with an SDK pays). Prints tasks/s per round and the medians.

    python packages/store-sql/bench/telemetry_overhead.py --rounds 4 --tasks 3000
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bench
from tasks_core import telemetry


def _enable() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer = TracerProvider()
    tracer.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    telemetry.enable(tracer_provider=tracer,
                     meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]))


async def _round(args: argparse.Namespace, on: bool) -> float:
    from tasks_store_sql.plugin import drop_namespace

    namespace = "tel_" + secrets.token_hex(3)
    target = bench._sql_target("postgresql", args.postgres_url, namespace, None)
    probe = bench.Probe()
    if on:
        _enable()
    try:
        store = await target.open()
        try:
            await bench.enqueue(bench.make_app(store, probe), args.tasks, args.batch)
        finally:
            await target.close(store)
        store = await target.second(store)
        try:
            return await bench.burn_down(bench.make_app(store, probe), probe, args.tasks,
                                         args.concurrency, "auto")
        finally:
            await target.close(store)
    finally:
        telemetry.disable()
        await drop_namespace(args.postgres_url, namespace)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres-url", default=bench.POSTGRES_URL)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=4, help="pairs (off, on)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    await bench._ensure_database(bench._dsn(args))
    figures: dict[bool, list[float]] = {False: [], True: []}
    for number in range(args.rounds):
        for on in ((False, True) if number % 2 == 0 else (True, False)):
            rate = await _round(args, on)
            figures[on].append(rate)
            print(f"round {number + 1} telemetry {'on ' if on else 'off'}: {rate:,.0f} tasks/s",
                  flush=True)
    off, on = statistics.median(figures[False]), statistics.median(figures[True])
    print(f"median off {off:,.0f} tasks/s, on {on:,.0f} tasks/s: on/off {on / off:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
