"""Telemetry around the edges: a caller's trace context is stored only in a form the task
may keep, a periodic tick starts a trace of its own, and a worker that cannot open its
store closes its metrics endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from _runtime_kit import ALICE, TIMEOUT, fast_worker, make_app
from tasks_core import App, Snapshot, System, TaskContext, UnknownStore, telemetry
from tasks_core.cli.main import run

otel_sdk = pytest.importorskip("opentelemetry.sdk")

from opentelemetry import context, trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def provider() -> TracerProvider:
    """The tracer provider of the test, recording into ``provider.exporter``."""
    made = TracerProvider()
    made.exporter = InMemorySpanExporter()  # type: ignore[attr-defined]
    made.add_span_processor(SimpleSpanProcessor(made.exporter))  # type: ignore[attr-defined]
    return made


@pytest.fixture
def spans(provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    """Tracing on into ``provider``'s in-memory exporter; off again afterwards."""
    telemetry.enable(tracer_provider=provider)
    try:
        yield provider.exporter  # type: ignore[attr-defined]
    finally:
        telemetry.disable()


def _incoming(entries: int) -> object:
    """A caller's remote span context with a W3C ``tracestate`` of ``entries`` entries of
    49 characters (16 make 799 characters: valid W3C, past what a task keeps)."""
    state = TraceState([(f"vendor{n:02}", "x" * 40) for n in range(entries)])
    remote = SpanContext(trace_id=0x1234, span_id=0x5678, is_remote=True,
                         trace_flags=TraceFlags(1), trace_state=state)
    return context.attach(trace.set_span_in_context(NonRecordingSpan(remote)))


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_long_tracestate_is_trimmed_to_what_the_task_keeps(
    spans: InMemorySpanExporter, tmp_path: Path, store: str
) -> None:
    """A submit inside a context whose ``tracestate`` is longer than a task keeps (512
    characters) MUST store a task that reads back and runs, in the caller's trace, its
    ``tracestate`` cut by whole entries from the end — on every store alike (a SQLite
    file read it back as a corrupt record)."""
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path / 'tasks.db'}"
    app = App(url)

    @app.task
    async def ok(ctx: TaskContext) -> int:
        return 1

    async with app:
        token = _incoming(16)
        try:
            submitted = await app.submit(ok, None, ALICE)
        finally:
            context.detach(token)  # type: ignore[arg-type]
        stored = (await app.get(submitted.id, ALICE)).work.trace_context
        async with fast_worker(app):
            done = await app.wait(submitted.id, ALICE, timeout=TIMEOUT)
    assert "completed" == done.status
    assert stored is not None
    kept = stored["tracestate"].split(",")
    assert 0 < len(stored["tracestate"]) <= 512
    assert [f"vendor{n:02}=" + "x" * 40 for n in range(len(kept))] == kept
    assert stored["traceparent"].startswith(f"00-{0x1234:032x}-")


async def test_a_periodic_tick_starts_a_trace_of_its_own(
    spans: InMemorySpanExporter, provider: TracerProvider
) -> None:
    """A worker started inside a span (an application's startup) MUST NOT make that span
    the parent of its periodic ticks: each tick's ``submit`` starts a trace."""
    app = make_app()

    @app.periodic(every=60)
    async def tick(ctx: TaskContext) -> int:
        return 1

    tracer = trace.get_tracer("test", tracer_provider=provider)
    async with app:
        with tracer.start_as_current_span("startup"):
            worker = fast_worker(app)
            await worker.__aenter__()
        try:
            [made] = await _until_listed(app)
            await app.wait(made.id, System(), timeout=TIMEOUT)
        finally:
            await worker.__aexit__(None, None, None)
    [submit] = [s for s in spans.get_finished_spans() if s.name == "submit"]
    assert submit.parent is None


async def _until_listed(app: App) -> list[Snapshot]:
    """The tasks of ``app`` once there is one (a tick the worker makes), woken by the
    store's wakeups."""
    store = await app.open()
    async with asyncio.timeout(TIMEOUT):
        while not (found := (await app.list(System())).items):
            await store.wait_for_work(["default"], 0.5)
    return list(found)


async def test_a_worker_that_cannot_open_its_store_closes_its_metrics_endpoint() -> None:
    """``tasks worker --metrics-port`` whose store cannot be opened MUST close the endpoint
    it bound (and give telemetry back), so that a caller going on in the same process can
    serve again."""
    pytest.importorskip("prometheus_client")
    with pytest.raises(UnknownStore):
        await run(["worker", "m:app", "--metrics-port", "0"], app=App("bogus://x"))
    assert telemetry.active is None
    endpoint = telemetry.serve_prometheus(0)
    endpoint.close()
