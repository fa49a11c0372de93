"""Scenario C: raw JetStream appends to a scratch stream on the stack's nats-server (the infra reference)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import msgspec
from harness import TENANT, Env, log
from sampling import Procs, other_load
from scenarios import stream_messages

from treadle.core.envelope import Envelope
from treadle.eventlog import log as eventlog_module
from treadle.eventlog.errors import Conflict
from treadle.eventlog.log import EventLog
from treadle.eventlog.streams import EVENTS

SCRATCH_STREAM = "TREADLE_BENCH_SCRATCH"
SCRATCH_PREFIX = "treadlebench"


async def raw_appends(env: Env, total: int, actors: int, batches: int) -> dict:
    """C: EventLog.append (50 serial OCC actors) and js.publish_async (window 256) to a scratch stream."""
    log(f"scenario C: raw JetStream appends, {total} events")
    js = env.js
    cfg = dataclasses.replace(EVENTS, name=SCRATCH_STREAM, subjects=[f"{SCRATCH_PREFIX}.>"], num_replicas=1)
    with contextlib.suppress(Exception):
        await js.delete_stream(SCRATCH_STREAM)
    await js.add_stream(cfg)
    out: dict[str, Any] = {"stream": SCRATCH_STREAM, "events": total, "actors": actors}
    now = datetime.now(UTC)

    def envelope(thread: str, k: int) -> Envelope:
        return Envelope(
            id=f"evt_{uuid.uuid4().hex}",
            type="run.warning",
            tenant=TENANT,
            thread=thread,
            at=now,
            command_id=f"cmd_{k}",
            actor="bench",
            data={"run_id": "run_x", "message": f"n{k}"},
        )

    try:
        # EventLog writes to its own subjects; point this process's view of them at the scratch stream
        scratch = SimpleNamespace(
            event=lambda t, th, ty: f"{SCRATCH_PREFIX}.evt.{t}.{th}.{ty}",
            thread_events=lambda t, th: f"{SCRATCH_PREFIX}.evt.{t}.{th}.>",
            EVENTS_STREAM=SCRATCH_STREAM,
        )
        original = eventlog_module.subjects  # type: ignore[attr-defined]  # the module log.py imports
        eventlog_module.subjects = scratch  # type: ignore[assignment,attr-defined]  # a stand-in module: scratch subjects
        try:
            elog = EventLog(env.nc)
            per_actor = total // actors
            conflicts = 0

            async def actor(i: int) -> None:
                nonlocal conflicts
                thread = f"thr_raw{i:03d}"
                seq = 0
                for k in range(per_actor):
                    while True:
                        try:
                            seq = await elog.append(TENANT, thread, seq, [envelope(thread, k)])
                            break
                        except Conflict as exc:
                            conflicts += 1
                            seq = exc.actual_seq if exc.actual_seq is not None else await elog.last_seq(TENANT, thread)

            cpu0, t0, busy0 = env.procs.cpu(), time.perf_counter(), Procs.machine_busy()
            await asyncio.gather(*(actor(i) for i in range(actors)))
            dt = time.perf_counter() - t0
            cpu1 = env.procs.cpu()
            n = per_actor * actors
            out["eventlog_append_actors"] = {
                "events": n,
                "seconds": round(dt, 3),
                "events_per_s": round(n / dt),
                "conflicts": conflicts,
                "other_load_cores": other_load(cpu0, cpu1, busy0, dt),
                "nats_cpu_us_per_event": round((cpu1["nats-server"] - cpu0["nats-server"]) / n * 1e6, 1),
                "client_cpu_us_per_event": round((cpu1["bench-client"] - cpu0["bench-client"]) / n * 1e6, 1),
            }

            # the same with 3-event decisions, as the coordinator and supervisor write them (atomic batch)
            decisions = max(actors, batches // actors * actors)

            async def batch_actor(i: int) -> None:
                thread = f"thr_rawb{i:03d}"
                seq = 0
                for k in range(decisions // actors):
                    seq = await elog.append(TENANT, thread, seq, [envelope(thread, k) for _ in range(3)])

            cpu0, t0, busy0 = env.procs.cpu(), time.perf_counter(), Procs.machine_busy()
            await asyncio.gather(*(batch_actor(i) for i in range(actors)))
            dt = time.perf_counter() - t0
            cpu1 = env.procs.cpu()
            out["eventlog_append_batch3_actors"] = {
                "decisions": decisions,
                "events": decisions * 3,
                "seconds": round(dt, 3),
                "other_load_cores": other_load(cpu0, cpu1, busy0, dt),
                "decisions_per_s": round(decisions / dt),
                "events_per_s": round(decisions * 3 / dt),
                "nats_cpu_us_per_decision": round((cpu1["nats-server"] - cpu0["nats-server"]) / decisions * 1e6, 1),
                "client_cpu_us_per_decision": round((cpu1["bench-client"] - cpu0["bench-client"]) / decisions * 1e6, 1),
            }
        finally:
            eventlog_module.subjects = original  # type: ignore[attr-defined]  # the module put back

        payload = msgspec.json.encode(envelope("thr_pipe", 0))
        pjs = env.nc.jetstream(publish_async_max_pending=256)
        cpu0, t0, busy0 = env.procs.cpu(), time.perf_counter(), Procs.machine_busy()
        futures = []
        for k in range(total):
            futures.append(await pjs.publish_async(f"{SCRATCH_PREFIX}.pipe.t{k % actors}", payload))
        acks = await asyncio.gather(*futures)
        dt = time.perf_counter() - t0
        cpu1 = env.procs.cpu()
        out["publish_async_w256"] = {
            "events": len(acks),
            "seconds": round(dt, 3),
            "events_per_s": round(len(acks) / dt),
            "other_load_cores": other_load(cpu0, cpu1, busy0, dt),
            "nats_cpu_us_per_event": round((cpu1["nats-server"] - cpu0["nats-server"]) / total * 1e6, 1),
            "client_cpu_us_per_event": round((cpu1["bench-client"] - cpu0["bench-client"]) / total * 1e6, 1),
            "payload_bytes": len(payload),
        }
        out["stream_messages"] = await stream_messages(js, SCRATCH_STREAM)
    finally:
        with contextlib.suppress(Exception):
            await js.delete_stream(SCRATCH_STREAM)
    log(
        f"scenario C: EventLog.append {out['eventlog_append_actors']['events_per_s']} events/s, 3-event batches "
        f"{out['eventlog_append_batch3_actors']['decisions_per_s']} decisions/s, "
        f"publish_async {out['publish_async_w256']['events_per_s']} events/s"
    )
    return out
