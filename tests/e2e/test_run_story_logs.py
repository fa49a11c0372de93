"""Issue 41, items 1 and 2: an operator reads a run's story back from the logs by its id, and its trace from an
OTLP/gRPC collector. A stack of its own runs in JSON log mode with traces going to a gRPC TraceService on
loopback; one run asks an approval and completes, another fails. Every worker line is one JSON object (library
lines too); each run transition is one INFO line naming its tenant, thread, run, attempt, trace and span; the
gateway's access log names the route template, status, duration, tenant and request id."""

from __future__ import annotations

import json
from typing import Any

import nats

from tests.support.api import make_api
from tests.support.helpers import quiet, wait_for
from tests.support.mcp_client import call, mcp_session
from tests.support.otlp import GrpcReceiver, value
from tests.support.scripts import approval, script, text
from treadle.cli.stack import WORKERS, Stack


class Lines:
    """What the workers wrote, as decoded JSON lines (and the lines that were not JSON)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.not_json: list[str] = []

    def __call__(self, name: str, line: str) -> None:
        quiet(name, line)
        if name.split("-node-")[0] not in WORKERS and not name.startswith("provider-host"):
            return  # nats-server's and redis-server's own lines
        try:
            entry = json.loads(line)
        except ValueError:
            self.not_json.append(f"{name} | {line}")
            return
        self.entries.append(entry)

    def of_run(self, run: str) -> list[dict[str, Any]]:
        return [e for e in self.entries if e.get("run") == run and e.get("logger") == "treadle.runs"]


async def test_a_runs_story_reads_back_from_json_logs_by_its_id_with_its_trace_over_grpc(tmp_path):
    lines = Lines()
    async with GrpcReceiver() as receiver:
        env = {
            "TREADLE_LOG_FORMAT": "json",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_HEADERS": "x-collector-key=secret-1",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test,service.version=41",
        }
        async with Stack(tmp_path / "stack", env=env, on_output=lines) as stack:
            nc = await nats.connect(stack.nats_url)
            api = await make_api(stack, nc, "storyteller")
            try:
                thread = await api.create_thread()
                sent = await api.send(thread, "may I?", script=script(approval("run ls?"), text("done")))
                request = await api.wait_request(thread)
                await api.post(f"/v1/requests/{request['id']}/respond", {"decision": "accept"}, expect=200)
                done = await api.wait_run(sent["run_id"])
                failing = await api.send(thread, "fail", script=script({"type": "fail", "message": "boom\nat line 2"}))
                await api.wait_run(failing["run_id"], "failed")
                # a request id the client chose comes back and is logged; a hostile one is replaced
                mine = await api.request("GET", f"/v1/threads/{thread}", headers={"X-Request-Id": "req-41.a"})
                hostile = await api.request("GET", f"/v1/threads/{thread}", headers={"X-Request-Id": "a b\tc" * 40})
                async with mcp_session(stack.api_url, api.token) as mcp:  # a mounted app's requests name theirs too
                    await call(mcp, "capabilities")
            finally:
                await api.close()
                await nc.close()

            run, run_id, failed_id = done, sent["run_id"], failing["run_id"]

            def story() -> list[str] | None:
                events = [e["event"] for e in lines.of_run(failed_id)]
                return events if "run.failed" in events else None

            await wait_for(story, timeout=20, what="the failed run's last line")
            spans_wanted = {"treadle-gateway", "treadle-coordinator", "treadle-supervisor", "treadle-provider-host"}

            def exported() -> bool:
                return spans_wanted <= {svc for svc, _ in receiver.spans}

            await wait_for(exported, timeout=30, what="spans of every worker over gRPC")

    assert not lines.not_json, lines.not_json[:10]  # every worker's and every library's line is JSON
    ours = lines.of_run(run_id)
    events = [e["event"] for e in ours]
    for wanted in ("run.queued", "run.started", "request.opened", "request.resolved", "run.completed"):
        assert events.count(wanted) == 1, events
    assert events.index("run.queued") < events.index("run.started") < events.index("run.completed"), events
    for entry in ours:
        assert entry["level"] == "INFO" and entry["tenant"] == "storyteller" and entry["thread"] == thread, entry
        assert len(entry["trace_id"]) == 32 and len(entry["span_id"]) == 16, entry
        # an answer is about the request (its run), not an attempt
        assert entry["event"] == "request.resolved" or entry["attempt"].startswith("att_"), entry
    assert {e["trace_id"] for e in ours if e["event"] in ("run.queued", "run.started")} <= {e["trace_id"] for e in ours}
    answered = next(e for e in ours if e["event"] == "request.resolved")
    assert answered["decision"] == "accept" and answered["msg"] == "approval answered (accept)", answered
    failed = next(e for e in lines.of_run(failed_id) if e["event"] == "run.failed")
    assert "boom at line 2" in failed["reason"] and failed["msg"].startswith("run failed: "), failed
    sessions = [e for e in lines.entries if e.get("event") == "provider.attached" and e.get("thread") == thread]
    assert sessions and sessions[0]["msg"].startswith("session started"), sessions

    # the access log: route template, status, duration, tenant, request id
    access = [e for e in lines.entries if e.get("logger") == "treadle.access"]
    sends = [e for e in access if e["route"] == "/v1/threads/{thread_id:str}/messages" and e["method"] == "POST"]
    assert sends and all(e["status"] == 202 and e["tenant"] == "storyteller" for e in sends), sends
    assert all(isinstance(e["duration_ms"], float) and len(e["request"]) == 32 for e in sends), sends
    assert not [e for e in access if e["route"] in ("/readyz", "/healthz")]  # probes that succeed: DEBUG
    assert mine.headers["x-request-id"] == "req-41.a"
    assert any(e.get("request") == "req-41.a" and e["status"] == 200 for e in access)
    assert hostile.headers["x-request-id"] != "a b\tc" * 40 and len(hostile.headers["x-request-id"]) == 32
    mcp_lines = [e for e in access if e["route"] == "/mcp"]
    assert mcp_lines and all(e["tenant"] == "storyteller" for e in mcp_lines), mcp_lines

    # the trace of the run, over gRPC: services as named, resource attributes, semantic conventions' names
    trace_id = bytes.fromhex(next(e for e in ours if e["event"] == "run.queued")["trace_id"])
    in_trace = [(svc, s) for svc, s in receiver.spans if s.trace_id == trace_id]
    assert spans_wanted <= {svc for svc, _ in in_trace}, sorted({(svc, s.name) for svc, s in in_trace})
    gateway = receiver.resources["treadle-gateway"]
    assert gateway["deployment.environment.name"] == "test" and gateway["service.version"] == "41", gateway
    assert gateway["process.pid"] > 0 and gateway["process.runtime.name"] == "cpython", gateway
    assert all(h.get("x-collector-key") == "secret-1" for h in receiver.headers), receiver.headers[:2]
    attrs = {s.name: {a.key: value(a.value) for a in s.attributes} for _, s in in_trace}
    (root,) = [n for n in attrs if n == "POST /v1/threads/{thread_id:str}/messages"]
    assert attrs[root]["http.request.method"] == "POST" and attrs[root]["http.response.status_code"] == 202
    assert attrs[root]["http.route"] == "/v1/threads/{thread_id:str}/messages", attrs[root]
    handled = [a for n, a in attrs.items() if n.startswith("handle ")]
    assert handled and all(a["messaging.system"] == "nats" for a in handled), handled
    assert all(a["messaging.operation.type"] == "process" and a["messaging.destination.name"] for a in handled)
    appends = [a for n, a in attrs.items() if n.startswith("append ")]
    assert appends and all(a["messaging.operation.type"] == "send" for a in appends), appends
    assert run["status"] == "completed"
