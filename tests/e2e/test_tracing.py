"""Issue 23, item 3 (and 41, item 2): with an OTLP endpoint set, one run is one connected trace. A stack of its
own exports to an OTLP/HTTP receiver in this process (protobuf decoded with opentelemetry-proto). The HTTP request
that sent the message is the root; under it the command (the coordinator's decision), the supervisor's dispatch
of the run it queued, the host's turn start, one span for the provider's turn, the supervisor's handling of
each provider event under that turn, the checkpoint captures and the projections of the events appended on
the way (W3C trace context in the NATS headers, stored with the events)."""

from __future__ import annotations

import itertools
from typing import Any

import nats

from tests.support.api import make_api
from tests.support.helpers import quiet, wait_for
from tests.support.otlp import HttpReceiver, value
from tests.support.scripts import script, text, write
from treadle.cli.stack import Stack

_tenants = itertools.count()


def _parent(spans: dict[bytes, tuple[str, Any]], span: Any) -> str:
    """The name of ``span``'s parent in the trace ('' for the root or a parent outside it)."""
    found = spans.get(span.parent_span_id)
    return found[1].name if found else ""


def _descends(spans: dict[bytes, tuple[str, Any]], span: Any, name: str) -> bool:
    while (found := spans.get(span.parent_span_id)) is not None:
        span = found[1]
        if span.name == name:
            return True
    return False


WANTED = {
    "treadle-gateway",
    "treadle-coordinator",
    "treadle-supervisor",
    "treadle-provider-host",
    "treadle-checkpoints",
    "treadle-projector",
}


async def test_one_run_is_one_connected_trace_from_the_http_request_to_its_projection(tmp_path):
    async with HttpReceiver() as receiver:
        # the traces' own endpoint, taken as it is (no /v1/traces appended), and the protocol named
        env = {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{receiver.port}/collect/traces",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "1.0",
        }
        async with Stack(tmp_path / "stack", env=env, on_output=quiet) as stack:
            nc = await nats.connect(stack.nats_url)
            api = await make_api(stack, nc, f"traced{next(_tenants)}")
            try:
                thread = await api.create_thread()
                # a file written: the run's end captures a checkpoint with something in it
                accepted = await api.send(thread, "hello", script=script(write("traced.txt", "hi\n"), text("done")))
                run = await api.wait_run(accepted["run_id"])
                assert run["status"] == "completed", run

                def root():
                    return next(
                        (s for svc, s in receiver.spans if svc == "treadle-gateway" and s.name.startswith("POST ")
                         and s.name.endswith("/messages")),
                        None,
                    )  # fmt: skip

                send = await wait_for(root, timeout=20, what="the send request span exported")

                def trace():
                    found = {s.span_id: (svc, s) for svc, s in receiver.spans if s.trace_id == send.trace_id}
                    services = {svc for svc, _ in found.values()}
                    connected = all(s.parent_span_id in found for _, s in found.values() if s is not send)
                    # each worker exports on its own schedule: wait for the last of what is asserted below, the
                    # projection and the checkpoint of the run's end (under the provider's turn)
                    ended = {s.name for _, s in found.values() if _descends(found, s, "provider turn")} >= {
                        "project",
                        "checkpoint capture",
                    }
                    return found if WANTED <= services and connected and ended else None

                try:
                    spans = await wait_for(trace, timeout=30, what="every worker's spans in the request's trace")
                except TimeoutError:
                    print(sorted({(svc, s.name) for svc, s in receiver.spans if s.trace_id == send.trace_id}))
                    raise
            finally:
                await api.close()
                await nc.close()
    tree = "\n".join(
        f"{svc:22} {s.name:50} {_parent(spans, s):45} {(s.end_time_unix_nano - s.start_time_unix_nano) / 1e6:8.2f} ms"
        for svc, s in sorted(spans.values(), key=lambda x: x[1].start_time_unix_nano)
    )
    print(tree)
    assert not send.parent_span_id, tree  # the request is the root, and every other span hangs under it
    assert all(s.parent_span_id in spans for _, s in spans.values() if s is not send), tree

    def named(prefix: str) -> list[Any]:
        return [s for _, s in spans.values() if s.name.startswith(prefix)]

    assert [_parent(spans, s) for s in named("command SendMessage")] == [send.name], tree
    starts = named("host turn.start")  # a dispatch redelivered asks again (answered "already")
    assert starts and all(_parent(spans, s).startswith("handle supervisor-dispatch") for s in starts), tree
    assert all(_descends(spans, s, "command SendMessage") for s in starts), tree  # the run the command queued
    # one span for the turn, not one per event
    assert [_parent(spans, s) for s in named("provider turn")] == ["host turn.start"], tree
    provider_events = named("handle supervisor-provider")
    assert provider_events and all(_parent(spans, s) == "provider turn" for s in provider_events), tree
    captures = named("checkpoint capture")  # the baseline at dispatch, the run's own at its end
    assert all(_parent(spans, s).startswith("handle supervisor-") for s in captures), tree
    assert any(_parent(spans, s).startswith("handle supervisor-provider") for s in captures), tree
    projections = named("project")
    assert projections and all(_parent(spans, s).startswith("append ") for s in projections), tree
    assert any(_descends(spans, s, "command SendMessage") for s in projections), tree  # the run.queued append
    assert receiver.paths == {"/collect/traces"}, receiver.paths
    # the semantic conventions' names: HTTP server, messaging (NATS); the resource's process attributes
    attrs = {s.name: {a.key: value(a.value) for a in s.attributes} for _, s in spans.values()}
    assert attrs[send.name]["http.route"] == "/v1/threads/{thread_id:str}/messages", attrs[send.name]
    assert attrs[send.name]["http.response.status_code"] == 202 and send.kind == send.SPAN_KIND_SERVER
    (queued,) = [s for _, s in spans.values() if s.name == "append run.queued"]
    assert queued.kind == queued.SPAN_KIND_PRODUCER and attrs[queued.name]["messaging.system"] == "nats"
    assert {k for k in receiver.resources["treadle-coordinator"] if k.startswith("process.")} >= {"process.pid"}
