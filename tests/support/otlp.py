"""Collector-compatible OTLP trace receivers on loopback, for the tracing tests: OTLP/HTTP (POST /v1/traces with
a protobuf body) and OTLP/gRPC (the TraceService's Export), both decoding with opentelemetry-proto and keeping
what arrived as (service.name, resource attributes, span)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from treadle.ops.servers import free_port


def value(v: Any) -> Any:
    """An OTLP AnyValue as Python (the kinds Treadle's attributes use)."""
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Received:
    def __init__(self) -> None:
        self.spans: list[tuple[str, Any]] = []  # (service.name, Span)
        self.resources: dict[str, dict[str, Any]] = {}  # service.name -> its resource's attributes
        self.paths: set[str] = set()  # the HTTP paths or gRPC methods exports came to
        self.headers: list[dict[str, str]] = []

    def take(self, export: ExportTraceServiceRequest) -> None:
        for resource_spans in export.resource_spans:
            attrs = {a.key: value(a.value) for a in resource_spans.resource.attributes}
            service = str(attrs.get("service.name", ""))
            self.resources[service] = attrs
            for scope in resource_spans.scope_spans:
                self.spans.extend((service, s) for s in scope.spans)


class HttpReceiver(Received):
    """Just enough of an OTLP/HTTP collector: a protobuf POST, answered 200."""

    def __init__(self) -> None:
        super().__init__()
        self.port = free_port()

    async def __aenter__(self) -> HttpReceiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readline()
                if not request:
                    return
                self.paths.add(request.split(b" ")[1].decode())
                length, headers = 0, {}
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, val = line.decode().partition(":")
                    headers[name.strip().lower()] = val.strip()
                    if name.strip().lower() == "content-length":
                        length = int(val)
                self.headers.append(headers)
                self.take(ExportTraceServiceRequest.FromString(await reader.readexactly(length)))
                answer = ExportTraceServiceResponse().SerializeToString()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: "
                    + str(len(answer)).encode()
                    + b"\r\n\r\n"
                    + answer
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()


class GrpcReceiver(Received, trace_service_pb2_grpc.TraceServiceServicer):
    """Just enough of an OTLP/gRPC collector: the TraceService's Export, over plaintext HTTP/2 on loopback."""

    def __init__(self) -> None:
        super().__init__()
        self.port = free_port()

    async def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:  # noqa: N802 - the service's name
        self.paths.add("opentelemetry.proto.collector.trace.v1.TraceService/Export")
        self.headers.append({k: v for k, v in context.invocation_metadata()})
        self.take(request)
        return ExportTraceServiceResponse()

    async def __aenter__(self) -> GrpcReceiver:
        self._server = grpc.aio.server()
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)  # type: ignore[no-untyped-call]  # generated, unannotated
        self._server.add_insecure_port(f"127.0.0.1:{self.port}")
        await self._server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._server.stop(grace=None)
