"""Issue 23, item 3: with OTEL_EXPORTER_OTLP_ENDPOINT set, one run is one connected trace. A stack of its own
exports to an OTLP/HTTP receiver in this process (protobuf decoded with opentelemetry-proto); the HTTP request
that sent the message is the root, and the command, the coordinator's decision and the supervisor's dispatch
of the events it appended are spans of the same trace, each the child of one in it (W3C trace context in the
NATS headers)."""

from __future__ import annotations

import asyncio
import itertools

import nats
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.support.api import make_api
from tests.support.helpers import quiet, wait_for
from treadle.cli.stack import Stack
from treadle.ops.servers import free_port

_tenants = itertools.count()


class OtlpReceiver:
    """Just enough of an OTLP/HTTP collector: POST /v1/traces with a protobuf body, answered 200."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, object]] = []  # (service.name, Span)
        self.port = free_port()

    async def __aenter__(self) -> OtlpReceiver:
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
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode().partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                export = ExportTraceServiceRequest.FromString(body)
                for resource_spans in export.resource_spans:
                    attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                    for scope in resource_spans.scope_spans:
                        self.spans.extend((attrs.get("service.name", ""), s) for s in scope.spans)
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


async def test_one_run_is_one_connected_trace_from_the_http_request_on(tmp_path):
    async with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}"}
        async with Stack(tmp_path / "stack", env=env, on_output=quiet) as stack:
            nc = await nats.connect(stack.nats_url)
            api = await make_api(stack, nc, f"traced{next(_tenants)}")
            try:
                thread = await api.create_thread()
                accepted = await api.send(thread, "hello")
                await api.wait_run(accepted["run_id"])

                def root():
                    return next(
                        (s for svc, s in receiver.spans if svc == "treadle-gateway" and s.name.startswith("HTTP POST")
                         and s.name.endswith("/messages")),
                        None,
                    )  # fmt: skip

                try:
                    send = await wait_for(root, timeout=20, what="the send request span exported")
                except TimeoutError:
                    print(sorted({(svc, s.name) for svc, s in receiver.spans}))
                    raise

                def trace():
                    found = [(svc, s) for svc, s in receiver.spans if s.trace_id == send.trace_id]
                    services = {svc for svc, _ in found}
                    wanted = {"treadle-gateway", "treadle-coordinator", "treadle-supervisor", "treadle-provider-host"}
                    ids = {s.span_id for _, s in found}
                    connected = all(s.parent_span_id in ids for _, s in found if s is not send)
                    return found if wanted <= services and connected else None

                spans = await wait_for(
                    trace, timeout=30, what="coordinator and supervisor spans in the request's trace"
                )
            finally:
                await api.close()
                await nc.close()
    ids = {s.span_id for _, s in spans}
    assert all(s.parent_span_id in ids for _, s in spans if s is not send)  # connected: one tree
    assert not send.parent_span_id
    names = {s.name for _, s in spans}
    assert "command SendMessage" in names and any(n.startswith("handle supervisor") for n in names)
    assert "host turn.start" in names  # the provider turn, started on the host by the supervisor's dispatch
    print(
        "\n".join(
            f"{svc:22} {s.name:50} {(s.end_time_unix_nano - s.start_time_unix_nano) / 1e6:8.2f} ms" for svc, s in spans
        )
    )
