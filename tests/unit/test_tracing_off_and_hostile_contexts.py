"""Issue 23, item 3: tracing off costs nothing (no part of OpenTelemetry's tracing is imported by any worker,
the headers go out untouched); on, a projected batch starts one span per run's trace it holds, and trace
contexts that are malformed, huge or missing start none (a message's headers never multiply the spans)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

WORKERS = ", ".join(
    f"treadle.{m}"
    for m in (
        "gateway.app",
        "coordinator.service",
        "supervisor.service",
        "provider_host.service",
        "checkpoints_service.service",
        "projector.service",
    )
)

OFF = f"""
import json, sys
import {WORKERS}
from treadle.eventlog import tracing
headers = {{"Nats-Msg-Id": "x"}}
with tracing.span("s", {{"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}}):
    with tracing.spans_per_trace("project", [headers]):
        same = tracing.inject(headers) is headers and tracing.inject(None) is None
# a NATS message's span builds no attributes: the one shared do-nothing context
same = same and tracing.nats_span("h", "a.b", "process", headers, extra={{"k": "v"}}, n=1) is tracing.span("h")
loaded = [m for m in sys.modules if m.startswith(("opentelemetry.sdk.trace", "opentelemetry.exporter"))]
print(json.dumps({{"same": same, "loaded": loaded}}))
"""

ON = """
import json
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from treadle.eventlog import tracing
tracing.setup("unit")
exported = InMemorySpanExporter()
trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(exported))
one, two = "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "00-" + "c" * 32 + "-" + "d" * 16 + "-01"
batch = [None, {}, {"traceparent": "garbage"}, {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"},
         {"traceparent": "x" * 1_000_000}, {"traceparent": one}, {"traceparent": one.replace("b", "e")},
         {"traceparent": two}] + [{"traceparent": "00-%032x-%016x-01" % (0, i)} for i in range(1, 1000)]
with tracing.spans_per_trace("project", batch, {"treadle.partition": 3}):
    pass
spans = exported.get_finished_spans()
print(json.dumps(sorted("%032x/%016x" % (s.context.trace_id, s.parent.span_id) for s in spans)))
"""


def _run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | env
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_tracing_off_loads_no_tracing_and_leaves_headers_untouched():
    got = json.loads(_run(OFF))
    assert got == {"same": True, "loaded": []}


def test_a_projected_batch_joins_each_valid_trace_once_and_ignores_hostile_contexts():
    # nothing listens on port 9 of loopback: the batch exporter's last flush is refused at once
    spans = json.loads(_run(ON, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9"))
    assert spans == ["a" * 32 + "/" + "b" * 16, "c" * 32 + "/" + "d" * 16]


SETTINGS = """
import json
from treadle.eventlog import tracing
try:
    tracing.setup("unit")
except tracing.TracingSettingsError as exc:
    print(json.dumps({"error": str(exc), "enabled": tracing.enabled()}))
else:
    from opentelemetry import trace
    provider = trace.get_tracer_provider()
    resource = dict(provider.resource.attributes) if tracing.enabled() else {}
    sampler = provider.sampler.get_description() if tracing.enabled() else ""
    print(json.dumps({"enabled": tracing.enabled(), "service": resource.get("service.name"), "sampler": sampler}))
"""


def test_the_standard_otel_variables_choose_service_sampler_and_protocol_and_a_bad_protocol_is_refused():
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    assert json.loads(_run(SETTINGS, **endpoint)) == {
        "enabled": True,
        "service": "treadle-unit",
        "sampler": "ParentBased{root:AlwaysOnSampler,remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}",
    }
    named = json.loads(
        _run(
            SETTINGS,
            **endpoint,
            OTEL_SERVICE_NAME="ops-gw",
            OTEL_TRACES_SAMPLER="traceidratio",
            OTEL_TRACES_SAMPLER_ARG="0.25",
        )
    )
    assert named["service"] == "ops-gw" and named["sampler"] == "TraceIdRatioBased{0.25}", named
    by_attributes = json.loads(_run(SETTINGS, **endpoint, OTEL_RESOURCE_ATTRIBUTES="service.name=from-attrs"))
    assert by_attributes["service"] == "from-attrs"
    only_traces = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces"}
    assert json.loads(_run(SETTINGS, **only_traces, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="grpc"))["enabled"] is True
    assert json.loads(_run(SETTINGS, **endpoint, OTEL_TRACES_EXPORTER="none"))["enabled"] is False
    refused = json.loads(_run(SETTINGS, **endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="http/json\n" + "x" * 500))
    assert refused["enabled"] is False and "not supported" in refused["error"] and len(refused["error"]) < 200
