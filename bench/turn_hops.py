"""Where a warm turn's time goes over the HTTP path: one thread, sequential turns on a private stack with
real workers (the setup of ``bench/codex_overhead.py`` / ``bench/claude_overhead.py``), a wiretap on ``>``
(``bench/wiretap.py``, a process of its own) recording every NATS message with a time. Prints the median time from
the POST to the first message of each kind for the thread, and one warm turn's full timeline.

    scripts/loopback-only.sh .venv/bin/python bench/turn_hops.py codex [--turns 12]
    scripts/loopback-only.sh .venv/bin/python bench/turn_hops.py claude [--turns 12]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))  # tests.codex.codex_mock, tests.claude.mock_api

import nats  # noqa: E402
from wiretap import Wiretap  # noqa: E402

from treadle.cli.stack import Stack  # noqa: E402
from treadle.client.http import TreadleClient  # noqa: E402
from treadle.ops.tokens import TokenStore  # noqa: E402


class Arrivals(list):
    """The mock's list of requests seen, each append timed: when a model request reached the mock."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def append(self, item) -> None:
        self.times.append(time.perf_counter())
        super().append(item)


class Marks:
    """A direct turn's sink: the time of the first event of each kind since the call."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.seen: dict[str, float] = {}

    def _mark(self, kind: str) -> None:
        self.seen.setdefault(kind, time.perf_counter() - self.t0)

    async def event(self, body) -> None:
        self._mark(type(body).__name__)

    async def text(self, *args) -> None:
        self._mark("text")

    async def text_done(self, *args) -> None:
        self._mark("text_done")


THREAD = re.compile(rb'"thread(?:_id)?":"(thr_[a-z0-9]+)"')
TYPE = re.compile(rb'"type":"([a-z_.]+)"')


def label(subject: str, reply: str | None, data: bytes, thread: str, acks: dict[str, str]) -> str | None:
    parts = subject.split(".")
    if subject.startswith(("treadle.evt.", "treadle.prov.", "treadle.live.")):
        if parts[3] != thread:
            return None
        what = (
            subject.split(".", 4)[4]
            if parts[1] == "evt"
            else "live"
            if parts[1] == "live"
            else "prov:" + (m.group(1).decode() if (m := TYPE.search(data)) else "?")
        )
        if reply and reply.startswith("$JS.ACK"):
            tok = reply.split(".")
            consumer = tok[3] if len(tok) == 9 else tok[5]
            consumer = consumer if not consumer.startswith(("_", "OC")) and len(consumer) < 40 else "ordered/sse"
            acks[reply] = f"ack[{consumer}] {what}"
            return f"deliver[{consumer}] {what}"
        return "live publish" if parts[1] == "live" else (f"append {what}" if parts[1] == "evt" else f"publish {what}")
    if subject in acks:
        return acks.pop(subject)
    if subject.startswith("treadle.projected.") and parts[3] == thread:
        return f"projected notice {data.decode()}"
    if subject.startswith("$JS.API.DIRECT.GET.") and thread.encode() in data:
        return "direct get (a read's last sequence, or a log read)"
    if subject.startswith(("treadle.cmd.", "treadle.host.", "treadle.ckpt.", "treadle.place.", "treadle.warm.")):
        m = THREAD.search(data)
        name = None
        if m and m.group(1).decode() == thread:
            name = "request " + ".".join(parts[:2] + parts[-2:])
        elif subject.startswith(("treadle.ckpt.", "treadle.place.", "treadle.warm.")):
            name = "request " + ".".join(parts[:2] + parts[-1:])
        if name and reply:
            acks[reply] = "reply to " + name
        return name
    return None


async def run(kind: str, turns: int, otel: bool, wait_run: bool) -> None:
    work = Path(tempfile.mkdtemp(prefix="turn-hops-"))
    homes = ROOT / ".tools" / "bench-homes" / uuid.uuid4().hex[:8]
    if kind == "codex":
        from tests.codex.codex_mock import MockResponses, Text

        mock = await MockResponses().start()
        mock.requests = arrivals = Arrivals()
        for n in range(turns):
            mock.on(f"bench {n}", [Text("A short plain reply from the mock model.", chunks=3)])
        env = {
            "TREADLE_CODEX_BASE_URL": mock.base_url,
            "TREADLE_CODEX_API_KEY_ENV": "BENCH_MODEL_KEY",
            "TREADLE_CODEX_API_KEY": "sk-mock",
            "TREADLE_CODEX_HOME_ROOT": str(homes),
        }
        text = "bench {}"
        import codex_overhead

        direct: codex_overhead.Direct | claude_overhead.Direct = codex_overhead.Direct(mock, homes, work)
    else:
        from tests.claude.mock_api import MockMessagesApi

        claude_mock = await MockMessagesApi().__aenter__()
        claude_mock.seen = arrivals = Arrivals()
        env = {
            "TREADLE_CLAUDE_BASE_URL": claude_mock.url,
            "TREADLE_CLAUDE_API_KEY": "sk-ant-mock",
            "TREADLE_CLAUDE_MAX_RETRIES": "0",
        }
        text = "#text ping {}"
        import claude_overhead

        direct = claude_overhead.Direct(claude_mock, work)
    env["TREADLE_LOG_LEVEL"] = "WARNING"
    receiver = None
    if otel:  # the e2e test's in-process OTLP receiver: every service's spans, with their times
        sys.path.insert(0, str(ROOT))
        from tests.support.otlp import HttpReceiver

        receiver = await HttpReceiver().__aenter__()
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{receiver.port}"
    records: list[tuple[float, str, str | None, bytes]] = []
    marks: list[tuple[float, float, str]] = []
    direct_marks: list[dict[str, float]] = []
    http_arrivals: list[list[float]] = []
    returned: list[float] = []  # wait_run's return after run.completed was seen on the SSE stream
    ends: list[float] = []  # per turn: when the timeline ends (wait_run's return, or run.completed on SSE)
    walls: list[int] = []  # per turn: wall-clock ns minus perf_counter ns
    await direct.adapter.open_thread(None, "unused")
    try:
        async with Stack(work / "stack", env=env, on_output=lambda *a: None) as stack:
            nc = await nats.connect(stack.nats_url)
            token = await TokenStore(nc.jetstream()).create("bench", "alice")
            await nc.close()
            tap = await Wiretap.start(stack.nats_url)  # a process of its own: its times are not the bench loop's
            async with TreadleClient(stack.api_url, token, timeout=30) as client:
                thread = (await client.create_thread(provider=kind))["thread_id"]
                waiting: dict[str, asyncio.Future] = {}
                connected = asyncio.Event()

                async def follow() -> None:
                    async for event in client.events(thread, connected=connected):
                        if event.event in ("run.completed", "run.failed"):
                            f = waiting.get(event.json()["data"]["run_id"])
                            if f and not f.done():
                                f.set_result(time.perf_counter())

                follower = asyncio.create_task(follow())
                await connected.wait()
                for n in range(turns):
                    sink = Marks()
                    k = len(arrivals.times)
                    await direct.adapter.run_turn(direct_turn(n, text.format(n)), sink)
                    for i, t in enumerate(arrivals.times[k:]):
                        sink.seen[f"model request {i} arrived"] = t - sink.t0
                    sink._mark("returned")
                    direct_marks.append(sink.seen)
                    await asyncio.sleep(0.1)
                    t0 = time.perf_counter()
                    k = len(arrivals.times)
                    walls.append(time.time_ns() - int(t0 * 1e9))  # perf_counter → wall clock, as the spans are
                    sent = await client.send(thread, text.format(n))
                    f = waiting.setdefault(sent["run_id"], asyncio.get_running_loop().create_future())
                    if wait_run:  # as bench/claude_overhead.py: the SDK's wait for the run's end
                        await client.wait_run(sent["run_id"], timeout=60)
                        returned.append(time.perf_counter() - await asyncio.wait_for(f, 60))
                    else:
                        returned.append(0.0)
                    end = await asyncio.wait_for(f, 60)
                    ends.append(end + returned[-1])
                    marks.append((t0, end, sent["run_id"]))
                    http_arrivals.append([t - t0 for t in arrivals.times[k:]])
                    await asyncio.sleep(0.2)  # a quiet gap, so a turn's tail is not the next one's head
                follower.cancel()
            records.extend(r[:4] for r in await tap.stop(0.3))
    finally:
        await direct.adapter.close()
        await (mock.stop() if kind == "codex" else claude_mock.__aexit__(None, None, None))
        shutil.rmtree(homes, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)

    warm = marks[2:]
    hop: dict[str, list[float]] = collections.defaultdict(list)
    timelines = []
    for (t0, end, _), until in zip(warm, ends[2:], strict=True):
        acks: dict[str, str] = {}
        seen: dict[str, float] = {}
        lines = []
        for t, subject, reply, data in records:
            if not t0 - 0.002 <= t <= until + 0.002:
                continue
            name = label(subject, reply, data, thread, acks)
            if name:
                seen.setdefault(name, t - t0)
                lines.append((t - t0, name))
        for hop_name, after in seen.items():
            hop[hop_name].append(after)
        timelines.append((end - t0, lines))
    census(records, warm, ends[2:])
    totals = sorted(e - t for t, e, _ in warm)
    print(
        f"{kind}: {len(warm)} warm turns, POST → run.completed on SSE median {statistics.median(totals) * 1000:.1f} ms"
    )
    if wait_run:
        print(
            f"wait_run returned {statistics.median(returned[2:]) * 1000:.1f} ms (median) after SSE showed run.completed"
        )
    print("median ms from POST to the first message of each kind:")
    for hop_name, times in sorted(hop.items(), key=lambda kv: statistics.median(kv[1])):
        if len(times) >= len(warm) / 2:
            print(f"  {statistics.median(times) * 1000:8.1f}   {hop_name}  (n={len(times)})")
    for i in range(max(len(a) for a in http_arrivals[2:])):
        arrived = [a[i] for a in http_arrivals[2:] if len(a) > i]
        print(f"  {statistics.median(arrived) * 1000:8.1f}   model request {i} arrived (n={len(arrived)})")
    print("direct adapter, median ms from the call:")
    last = direct_marks[-1]
    for mark in sorted(last, key=lambda name: last[name]):
        print(f"  {statistics.median(m[mark] for m in direct_marks[2:]) * 1000:8.1f}   {mark}")
    first_t0, first_end, _ = marks[0]
    acks0: dict[str, str] = {}
    print(f"\n--- the first turn's timeline (run.completed on SSE at {(first_end - first_t0) * 1000:.1f} ms)")
    for t, subject, reply, data in records:
        if first_t0 - 0.002 <= t <= first_end + 0.002 and (name := label(subject, reply, data, thread, acks0)):
            print(f"  {(t - first_t0) * 1000:8.2f} ms  {name}")
    for i, t in enumerate(http_arrivals[0]):
        print(f"  {t * 1000:8.2f} ms  model request {i} arrived")
    total, lines = sorted(timelines)[len(timelines) // 2]
    print(f"\n--- the median turn's timeline (run.completed on SSE at {total * 1000:.1f} ms)")
    for t, name in lines:
        print(f"  {t * 1000:8.2f} ms  {name}")
    if receiver is not None:
        await receiver.__aexit__(None, None, None)
        spans_of(receiver.spans, warm)
        hop_table(receiver.spans, marks, walls, http_arrivals, returned, direct_marks, records, thread)


def kind_of(subject: str) -> str:
    """A subject with its ids and sequences cut off: what the broker carried, by kind."""
    parts = subject.split(".")
    if subject.startswith("$JS.ACK"):
        return "$JS.ACK (consumer acks)"
    if subject.startswith("$JS.API."):
        return ".".join(parts[:5] if parts[2] in ("CONSUMER", "STREAM") else parts[:4])
    if subject.startswith(("_INBOX", "$JS.")):
        return parts[0] + " (replies, deliveries to inboxes)"
    if subject.startswith("$KV."):
        return "$KV." + parts[1]
    if subject.startswith("$O."):
        return "$O." + parts[1] + "." + parts[2]
    return ".".join(parts[:3])


def census(records: list, warm: list, ends: list) -> None:
    """Every message the broker carried from a warm turn's POST to the next POST (the turn and its tail), by
    kind: what a turn costs nats-server."""
    counts: collections.Counter[str] = collections.Counter()
    sizes: collections.Counter[str] = collections.Counter()
    windows = [
        (t0, warm[i + 1][0] if i + 1 < len(warm) else end) for i, ((t0, _, _), end) in enumerate(zip(warm, ends))
    ]
    for t, subject, _, data in records:
        for a, b in windows:
            if a <= t < b:
                counts[kind_of(subject)] += 1
                sizes[kind_of(subject)] += len(data)
                break
    n = len(windows)
    print(
        f"messages per warm turn and its tail (mean of {n}): {sum(counts.values()) / n:.1f}, "
        f"{sum(sizes.values()) / n / 1024:.1f} KiB"
    )
    for kind, count in counts.most_common():
        print(f"  {count / n:6.1f} {sizes[kind] / n:9.0f} B  {kind}")


def provider_ats(records: list, thread: str, start: int, end: int) -> list[tuple[str, int]]:
    """The provider events of ``thread`` made between two wall times (ns): their type and ``at`` (host clock)."""
    import datetime as dt

    out = []
    for _, subject, _, data in records:
        if subject.startswith("treadle.prov.") and subject.split(".")[3] == thread:
            event = json.loads(data)
            at = int(dt.datetime.fromisoformat(event["at"].replace("Z", "+00:00")).timestamp() * 1e9)
            for body in [event["body"], *event.get("then", [])]:  # a burst is one message (``then``)
                if start <= at <= end and body["type"] in ("text.delta", "text.completed", "turn.completed"):
                    out.append((body["type"], at))
    seen: dict[str, int] = {}
    for kind, at in out:
        seen.setdefault(kind, at)
    return list(seen.items())


def hop_table(
    spans: list, marks: list, walls: list, arrivals: list, returned: list, direct: list, records: list, thread: str
) -> None:
    """One warm turn hop by hop (medians over the warm turns, ms), from the services' spans and the bench's
    own times (the POST, the model request reaching the mock, run.completed on the SSE stream) on one clock."""
    by_trace: dict[bytes, list] = collections.defaultdict(list)
    for svc, span in spans:
        by_trace[span.trace_id].append((f"{svc}: {span.name}", span))
    rows: dict[str, list[float]] = collections.defaultdict(list)
    for n in range(2, len(marks)):
        t0, end, _ = marks[n]
        post = int(t0 * 1e9) + walls[n]
        trace = min(
            (t for t in by_trace.values() if len(t) >= 5),
            key=lambda t: abs(min(s.start_time_unix_nano for _, s in t) - post),
        )

        def first(name: str, trace: list = trace) -> Any:  # an OTLP protobuf Span
            return next(s for k, s in sorted(trace, key=lambda x: x[1].start_time_unix_nano) if name in k)

        def last(name: str, trace: list = trace) -> Any:
            return [s for k, s in sorted(trace, key=lambda x: x[1].start_time_unix_nano) if name in k][-1]

        try:
            command, dispatch = first("command SendMessage"), first("handle supervisor-dispatch")
            start, turn = first("host turn.start"), first("provider turn")
            ended, capture = last("handle supervisor-provider"), last("checkpoint capture")
        except (StopIteration, IndexError):
            continue
        model = post + int(arrivals[n][0] * 1e9) if arrivals[n] else None
        sse = int(end * 1e9) + walls[n]
        ms = 1e6
        rows["POST → command decided, run.queued appended (gateway, coordinator)"].append(
            (command.end_time_unix_nano - post) / ms
        )
        rows["→ supervisor's dispatch starts (JetStream delivery)"].append(
            (dispatch.start_time_unix_nano - command.end_time_unix_nano) / ms
        )
        rows["→ host's turn.start (supervisor, request)"].append(
            (start.start_time_unix_nano - dispatch.start_time_unix_nano) / ms
        )
        if model is not None:
            rows["→ model request at the mock (host, adapter, runtime)"].append(
                (model - start.start_time_unix_nano) / ms
            )
            rows["→ turn end published, acked (runtime, host)"].append((turn.end_time_unix_nano - model) / ms)
        for kind, at in provider_ats(records, thread, post, sse):
            rows[f"   host made {kind} (its 'at'), ms after the model request"].append(
                (at - model) / ms if model else 0
            )
        rows["→ supervisor handles turn.completed (JetStream delivery)"].append(
            (ended.start_time_unix_nano - turn.end_time_unix_nano) / ms
        )
        rows["→ capture request at the checkpoint service"].append(
            (capture.start_time_unix_nano - ended.start_time_unix_nano) / ms
        )
        rows["checkpoint capture (service)"].append((capture.end_time_unix_nano - capture.start_time_unix_nano) / ms)
        rows["→ run.completed on the client's SSE stream (reply, append, gateway)"].append(
            (sse - capture.end_time_unix_nano) / ms
        )
        if returned[n]:
            rows["→ wait_run returns (GET run at min_seq)"].append(returned[n] * 1000)
        rows["total HTTP (POST → SSE, + wait_run)"].append((sse - post) / ms + returned[n] * 1000)
    print(f"\nper hop, one warm turn (median ms over {len(marks) - 2} turns):")
    for key, v in rows.items():
        print(f"  {statistics.median(v):7.1f}  {key}")
    d = direct[2:]
    calls = [m.get("model request 0 arrived") for m in d]
    if all(c is not None for c in calls):
        print(
            f"  direct: call → model request {statistics.median(calls) * 1000:.1f}, "
            f"→ TurnCompleted {statistics.median(m['TurnCompleted'] - m['model request 0 arrived'] for m in d) * 1000:.1f}, "
            f"total {statistics.median(m['returned'] for m in d) * 1000:.1f}"
        )


def spans_of(spans: list, warm: list) -> None:
    """Each span kind's median start and end relative to the POST (wall clock: the spans' own times)."""
    by_trace: dict[bytes, list] = collections.defaultdict(list)
    for svc, span in spans:
        by_trace[span.trace_id].append((svc, span))
    rows: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for trace in by_trace.values():
        roots = [s for _, s in trace if not s.parent_span_id]
        if len(roots) != 1 or len(trace) < 5:
            continue
        t0 = roots[0].start_time_unix_nano
        seen = set()
        for svc, span in sorted(trace, key=lambda x: x[1].start_time_unix_nano):
            key = f"{svc}: {span.name}"
            if key in seen:
                continue
            seen.add(key)
            rows[key].append(((span.start_time_unix_nano - t0) / 1e6, (span.end_time_unix_nano - t0) / 1e6))
    traces = sorted(
        (t for t in by_trace.values() if len(t) >= 5),
        key=lambda t: max(s.end_time_unix_nano for _, s in t) - min(s.start_time_unix_nano for _, s in t),
    )
    if traces:
        trace = traces[len(traces) // 2]
        t0 = min(s.start_time_unix_nano for _, s in trace)
        print("\nthe median run's spans (ms after the root span starts: start, end, duration)")
        for svc, span in sorted(trace, key=lambda x: x[1].start_time_unix_nano):
            a, b = (span.start_time_unix_nano - t0) / 1e6, (span.end_time_unix_nano - t0) / 1e6
            print(f"  {a:8.1f} {b:8.1f} {b - a:7.1f}   {svc}: {span.name}")
    print("\nall spans by kind:", dict(collections.Counter(f"{svc}: {s.name}" for svc, s in spans)))
    n = max((len(v) for v in rows.values()), default=0)
    print(f"\nspans (first of each kind per run; median start and end ms after the root span starts; {n} runs)")
    for key, v in sorted(rows.items(), key=lambda kv: statistics.median(x[0] for x in kv[1])):
        if len(v) >= n / 2:
            start, end = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
            print(f"  {start:8.1f} {end:8.1f} {end - start:7.1f}   {key}")


def direct_turn(n: int, text: str):
    from treadle.core.ids import IdFactory
    from treadle.providers.base import Turn

    return Turn(
        run_id=f"run_{n}",
        attempt_id=f"att_{n}",
        root_node_id=f"node_{n}",
        text=text,
        script=None,
        ids=IdFactory(f"att_{n}", 1_700_000_000_000 + n),
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["codex", "claude"])
    p.add_argument("--turns", type=int, default=12)
    p.add_argument("--otel", action="store_true", help="also the services' spans (an in-process OTLP receiver)")
    p.add_argument("--wait-run", action="store_true", help="wait with TreadleClient.wait_run (claude_overhead.py)")
    a = p.parse_args()
    asyncio.run(run(a.kind, a.turns, a.otel, a.wait_run))


if __name__ == "__main__":
    main()
