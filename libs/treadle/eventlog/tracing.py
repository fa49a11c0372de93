"""Traces (OpenTelemetry), off by default: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set (e.g. http://collector:4318)
each process exports its spans there over OTLP/HTTP, as service ``treadle-<kind>``.

One run is one trace: the W3C trace context (``traceparent``) travels in the NATS headers of what a span
publishes (``inject``), is stored with them in the streams, and is picked up by whoever handles it
(``span(name, headers)``), so the HTTP request, the command, the events the coordinator appends, the
supervisor's dispatch, the provider's turn and its events, the checkpoint capture and the projection all join
the trace the request started. Disabled, this module imports nothing of OpenTelemetry (its SDK and exporter
stay unloaded; redis-py imports the API for metrics of its own it leaves off), ``inject`` returns the headers
untouched and ``span`` starts nothing: no cost on the hot paths beyond one check."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any

_provider: Any = None


def enabled() -> bool:
    return _provider is not None


def setup(kind: str) -> None:
    """Export spans when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (and ``OTEL_SDK_DISABLED`` is not true)."""
    global _provider
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").rstrip("/")
    if not endpoint or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true" or _provider is not None:
        return
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": f"treadle-{kind}"}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=2), schedule_delay_millis=200)
    )
    trace.set_tracer_provider(provider)
    _provider = provider
    logging.getLogger(__name__).info("tracing: spans of treadle-%s go to %s", kind, endpoint)


def shutdown() -> None:
    """Flush what is buffered (a graceful stop must not lose the last spans)."""
    global _provider
    if _provider is not None:
        _provider.shutdown()
        _provider = None


def inject(headers: dict[str, str] | None) -> dict[str, str] | None:
    """``headers`` plus the current trace context (a new dict); unchanged when tracing is off or no span is
    current."""
    if _provider is None:
        return headers
    from opentelemetry import propagate  # imported once tracing is on: the client install has no OpenTelemetry

    carrier = dict(headers or {})
    propagate.inject(carrier)
    return carrier or headers


_OFF = contextlib.nullcontext()  # reusable: what ``span`` is while tracing is off, without a generator per call


def span(
    name: str, headers: dict[str, str] | None = None, **attributes: str | int
) -> contextlib.AbstractContextManager[None]:
    """A span, child of the trace context in ``headers`` when they carry one, else of the current span."""
    if _provider is None:
        return _OFF
    return _span(name, headers, attributes)


@contextlib.contextmanager
def _span(name: str, headers: dict[str, str] | None, attributes: dict[str, str | int]) -> Iterator[None]:
    from opentelemetry import context, propagate, trace

    parent = propagate.extract(headers) if headers and "traceparent" in headers else None
    token = context.attach(parent) if parent is not None else None
    try:
        with trace.get_tracer("treadle").start_as_current_span(name, attributes=attributes):
            yield
    finally:
        if token is not None:
            context.detach(token)


@contextlib.contextmanager
def spans_per_trace(name: str, carriers: Iterable[dict[str, str] | None], **attributes: str | int) -> Iterator[None]:
    """One span per distinct trace among ``carriers`` (the headers of a batch's messages), each the child of the
    first message of its trace: a batch that serves several runs shows in each run's trace, once. Headers
    without a valid trace context start nothing."""
    if _provider is None:
        yield
        return
    from opentelemetry import propagate, trace

    parents: dict[int, Any] = {}
    for headers in carriers:
        if headers and "traceparent" in headers:
            parent = propagate.extract(headers)
            context = trace.get_current_span(parent).get_span_context()
            if context.is_valid:
                parents.setdefault(context.trace_id, parent)
    tracer = trace.get_tracer("treadle")
    started = [tracer.start_span(name, context=parent, attributes=attributes) for parent in parents.values()]
    try:
        yield
    finally:
        for each in started:
            each.end()


def http_spans(app: Any) -> Any:  # ASGI in, ASGI out
    """ASGI middleware: each HTTP request is a server span named by its route template, the root of the trace
    its command and everything after it join; a ``traceparent`` the client sent is its parent."""

    async def middleware(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if _provider is None or scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        paths = sorted(getattr(scope.get("route_handler"), "paths", ()) or ())
        route = paths[0] if paths else "unmatched"
        with span(f"HTTP {scope.get('method', '')} {route}", headers, route=route):
            await app(scope, receive, send)

    return middleware
