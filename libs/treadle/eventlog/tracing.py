"""Traces (OpenTelemetry), off by default: configured by OpenTelemetry's own ``OTEL_*`` variables, read by the
official SDK and exporters. With ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set,
each process exports its spans over OTLP, ``http/protobuf`` (the default) or ``grpc`` as
``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`` says, with the endpoint, ``_HEADERS``, ``_TIMEOUT`` and certificates the
exporter reads itself; the sampler is ``OTEL_TRACES_SAMPLER``/``_ARG``'s; the service is ``treadle-<kind>`` unless
``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` name it, and ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none`` keep it off. Span attributes use the semantic conventions' names where one exists
(HTTP server, messaging for NATS, process); Treadle's own ids are ``treadle.*``.

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
import platform
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

_provider: Any = None

PROTOCOLS = ("http/protobuf", "grpc")
Kind = Literal["internal", "server", "client", "producer", "consumer"]
Attributes = Mapping[str, str | int]


class TracingSettingsError(ValueError):
    """An ``OTEL_*`` variable asks for something this build cannot do (a worker refuses to start with it)."""


def enabled() -> bool:
    return _provider is not None


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def wanted() -> bool:
    """Whether the ``OTEL_*`` variables ask for traces: an endpoint, and neither the SDK nor the exporter off."""
    if _env("OTEL_SDK_DISABLED").lower() == "true" or _env("OTEL_TRACES_EXPORTER").lower() == "none":
        return False
    return bool(_env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _env("OTEL_EXPORTER_OTLP_ENDPOINT"))


def protocol() -> str:
    """The OTLP protocol of the traces: the traces' own variable first, then the general one."""
    chosen = _env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL") or PROTOCOLS[0]
    if chosen not in PROTOCOLS:
        raise TracingSettingsError(f"OTLP protocol {chosen[:40]!r} is not supported: use one of {', '.join(PROTOCOLS)}")
    return chosen


def resource_attributes(kind: str) -> dict[str, str | int]:
    """Ours, under what the operator's ``OTEL_SERVICE_NAME``/``OTEL_RESOURCE_ATTRIBUTES`` say (those win)."""
    return {
        "service.name": f"treadle-{kind}",
        "service.namespace": "treadle",
        "process.pid": os.getpid(),
        "process.executable.name": os.path.basename(sys.executable),
        "process.runtime.name": sys.implementation.name,
        "process.runtime.version": platform.python_version(),
    }


def _exporter(chosen: str) -> Any:
    # Neither exporter gets an endpoint or headers here: each reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS,
    # _CERTIFICATE and _COMPRESSION itself (the HTTP one appends /v1/traces to the general endpoint, as the spec says).
    # Only the timeout is ours when unset: a collector that is away must not hold a graceful stop for 10 s.
    timeout = None if _env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or _env("OTEL_EXPORTER_OTLP_TIMEOUT") else 2
    if chosen == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        return Grpc(timeout=timeout)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http(timeout=timeout)


def setup(kind: str) -> None:
    """Export spans when the ``OTEL_*`` variables ask for it (see the module's docstring); else nothing."""
    global _provider
    if not wanted() or _provider is not None:
        return
    chosen = protocol()
    from opentelemetry import trace
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create(resource_attributes(kind)).merge(OTELResourceDetector().detect())
    provider = TracerProvider(resource=resource)  # its sampler: OTEL_TRACES_SAMPLER/_ARG, parent-based always-on
    delay = None if _env("OTEL_BSP_SCHEDULE_DELAY") else 200  # a run's spans show within a blink
    provider.add_span_processor(BatchSpanProcessor(_exporter(chosen), schedule_delay_millis=delay))
    trace.set_tracer_provider(provider)
    _provider = provider
    logging.getLogger(__name__).info(
        "tracing: spans of %s go out over OTLP %s", resource.attributes.get("service.name"), chosen
    )


def current_ids() -> dict[str, str]:
    """The trace and span ids of the current span, for log lines (empty while tracing is off or no span is)."""
    if _provider is None:
        return {}
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


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
    name: str, headers: dict[str, str] | None = None, attributes: Attributes | None = None, kind: Kind = "internal"
) -> contextlib.AbstractContextManager[None]:
    """A span, child of the trace context in ``headers`` when they carry one, else of the current span."""
    if _provider is None:
        return _OFF
    return _span(name, headers, attributes or {}, kind)


def nats_span(
    name: str,
    subject: str,
    operation: str,
    headers: dict[str, str] | None = None,
    kind: Kind = "internal",
    extra: dict[str, str | int] | None = None,
    **more: str | int,
) -> contextlib.AbstractContextManager[None]:
    """``span`` of a NATS message, its attributes ``nats_attributes`` and ``extra``: built only while tracing is on
    (every message a worker handles or appends passes here)."""
    if _provider is None:
        return _OFF
    return _span(name, headers, nats_attributes(subject, operation, **more) | (extra or {}), kind)


def nats_attributes(subject: str, operation: str, **more: str | int) -> dict[str, str | int]:
    """The messaging semantic conventions' attributes of a NATS message (``process``, ``send``, ``receive``)."""
    found: dict[str, str | int] = {
        "messaging.system": "nats",
        "messaging.destination.name": subject,
        "messaging.operation.type": operation,
    }
    return found | {f"messaging.{k.replace('_', '.')}": v for k, v in more.items()}


def _kind(kind: Kind) -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind[kind.upper()]


@contextlib.contextmanager
def _span(name: str, headers: dict[str, str] | None, attributes: Attributes, kind: Kind) -> Iterator[None]:
    from opentelemetry import context, propagate, trace

    parent = propagate.extract(headers) if headers and "traceparent" in headers else None
    token = context.attach(parent) if parent is not None else None
    try:
        with trace.get_tracer("treadle").start_as_current_span(name, kind=_kind(kind), attributes=attributes):
            yield
    finally:
        if token is not None:
            context.detach(token)


@contextlib.contextmanager
def spans_per_trace(
    name: str, carriers: Iterable[dict[str, str] | None], attributes: Attributes | None = None
) -> Iterator[None]:
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
    kind = _kind("consumer")
    started = [tracer.start_span(name, context=parent, kind=kind, attributes=attributes) for parent in parents.values()]
    try:
        yield
    finally:
        for each in started:
            each.end()


def http_spans(app: Any) -> Any:  # ASGI in, ASGI out
    """ASGI middleware around the router: each HTTP request is a server span, the root of the trace its command
    and everything after it join (a ``traceparent`` the client sent is its parent), named ``{method} {route}``
    by the route template once the router matched one, with the HTTP semantic conventions' attributes."""

    async def middleware(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if _provider is None or scope["type"] != "http":
            await app(scope, receive, send)
            return
        from opentelemetry import context, propagate, trace

        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        method = scope.get("method", "")
        status = 500
        parent = propagate.extract(headers) if "traceparent" in headers else None
        token = context.attach(parent) if parent is not None else None

        def sending(message: Any) -> Any:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            return send(message)

        client = scope.get("client") or ("", 0)
        attributes: dict[str, str | int] = {
            "http.request.method": method,
            "url.path": scope.get("path", ""),
            "url.scheme": scope.get("scheme", "http"),
            "network.protocol.version": scope.get("http_version", "1.1"),
            "client.address": client[0] or "",
        }
        if agent := headers.get("user-agent"):
            attributes["user_agent.original"] = agent[:256]
        tracer = trace.get_tracer("treadle")
        try:
            with tracer.start_as_current_span(f"{method} unmatched", kind=_kind("server"), attributes=attributes) as s:
                try:
                    await app(scope, receive, sending)
                finally:
                    paths = sorted(getattr(scope.get("route_handler"), "paths", ()) or ())
                    if paths:
                        s.update_name(f"{method} {paths[0]}")
                        s.set_attribute("http.route", paths[0])
                    s.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        from opentelemetry.trace import Status, StatusCode

                        s.set_status(Status(StatusCode.ERROR))
        finally:
            if token is not None:
                context.detach(token)

    return middleware
