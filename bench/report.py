"""The rich tables on stdout, and the targets checked against the peer's numbers."""

from __future__ import annotations

import sys

PEER = {
    "name": "LangGraph Agent Server (langgraph dev, in-memory)",
    "runs_per_s_50_threads": 50.0,
    "p50_ms": 1000.0,
    "cpu_ms_per_run": "17-20",
}
TARGETS = {"runs_per_s": 250.0, "p50_ms": 30.0, "cpu_ms_per_run": 4.0}


def verdicts(result: dict) -> list[dict]:
    out = []
    sc = result["scenarios"]

    def check(name: str, value: float | None, target: float, higher_is_better: bool, unit: str) -> None:
        ok = value is not None and (value >= target if higher_is_better else value <= target)
        out.append(
            {
                "target": name,
                "value": value,
                "goal": f"{'≥' if higher_is_better else '≤'} {target:g} {unit}",
                "pass": ok,
            }
        )

    if "B" in sc:
        check("B throughput (peer ~50 runs/s, ≥5×)", sc["B"]["runs_per_s"], TARGETS["runs_per_s"], True, "runs/s")
    for name in ("A", "B"):
        if name in sc:
            check(
                f"{name} p50 send→run.completed (peer ~1000 ms)",
                sc[name]["latency_ms"]["p50"],
                TARGETS["p50_ms"],
                False,
                "ms",
            )
    for name in ("A", "B"):
        if name in sc:
            check(
                f"{name} server CPU per run (peer 17–20 ms)",
                sc[name]["cpu"]["server_ms_per_run"],
                TARGETS["cpu_ms_per_run"],
                False,
                "ms",
            )
    if "D" in sc:
        check("D server CPU per run, one file written", sc["D"]["cpu"]["server_ms_per_run"], 6.0, False, "ms")
    if "F" in sc:
        check("F last 100 runs' CPU over the first 100's", sc["F"]["last_over_first"], 1.10, False, "×")
    if "E" in sc:
        check("E largest worker RSS after idle", sc["E"]["max_worker_rss_mb"], 150, False, "MB")
        check("E Redis bytes per idle thread", sc["E"]["redis_bytes_per_idle_thread"], 20_480, False, "B")
    return out


def print_report(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, width=140)
    sc = result["scenarios"]
    names = [n for n in ("A", "B", "D") if n in sc]

    t = Table(title=f"Treadle end-to-end ({result['meta']['cpus']} CPUs, loop={result['meta']['loop']})")
    t.add_column("metric")
    for n in names:
        t.add_column(f"{n}: {sc[n]['threads']} thread(s)", justify="right")

    def row(label: str, get) -> None:
        vals = []
        for n in names:
            try:
                v = get(sc[n])
            except (KeyError, TypeError):
                v = None
            vals.append("–" if v is None else (f"{v:,}" if isinstance(v, (int, float)) else str(v)))
        t.add_row(label, *vals)

    row("completed runs", lambda s: s["completed_runs"])
    row("runs/s", lambda s: s["runs_per_s"])
    row("p50 send→run.completed ms", lambda s: s["latency_ms"]["p50"])
    row("p99 send→run.completed ms", lambda s: s["latency_ms"]["p99"])
    row("max send→run.completed ms", lambda s: s["latency_ms"]["max"])
    row("p50 send→first live.delta ms", lambda s: s["first_delta_ms"]["p50"])
    row("p50 send→202 ms", lambda s: s["post_202_ms"]["p50"])
    row("durable events/run (SSE)", lambda s: s["durable_events_per_run"]["sse"])
    row("durable events/run (events stream)", lambda s: s["durable_events_per_run"]["events_stream"])
    row("provider events/run (provider stream)", lambda s: s["durable_events_per_run"]["provider_stream"])
    row("server CPU ms/run (total)", lambda s: s["cpu"]["server_ms_per_run"])
    procs = list(sc[names[0]]["cpu"]["per_process_ms_per_run"]) if names else []
    for p in procs:
        row(f"  CPU ms/run {p}", lambda s, p=p: s["cpu"]["per_process_ms_per_run"].get(p))
    row("server cores busy (avg)", lambda s: s["cpu"]["server_cores_busy"])
    row("bench client CPU ms/run", lambda s: s["cpu"]["bench_client_ms_per_run"])
    row("other load on the machine (cores)", lambda s: s["cpu"]["other_load_cores"])
    for p in procs:
        row(f"  peak RSS MB {p}", lambda s, p=p: s["peak_rss_mb"].get(p))
    row("redis bytes/thread (used_memory Δ)", lambda s: s["redis"]["bytes_per_thread"])
    row("redis MEMORY USAGE one thread doc", lambda s: s["redis"]["thread_doc_memory_usage_bytes"])
    row("  runs in that thread", lambda s: s["redis"]["runs_in_that_thread"])
    row("projection catch-up s", lambda s: s["projection_catch_up_s"])
    row("append conflicts per run (OCC)", lambda s: s["worker_metrics"]["append_conflicts_per_run"])
    row("checkpoint capture mean ms", lambda s: s["worker_metrics"]["checkpoint_capture_mean_ms"])
    row(
        "handler retries / dead letters",
        lambda s: f"{s['worker_metrics']['handler_retries']} / {s['worker_metrics']['dead_letters']}",
    )
    row("errors", lambda s: s["error_count"])
    if names:
        console.print(t)

    bt = Table(title="p50 ms from send until each durable event type is seen on SSE")
    bt.add_column("event")
    for n in names:
        bt.add_column(n, justify="right")
    types = []
    for n in names:
        for k in sc[n]["event_seen_p50_ms"]:
            if k not in types:
                types.append(k)
    for k in types:
        cells = []
        for n in names:
            v, seen = sc[n]["event_seen_p50_ms"].get(k), sc[n].get("event_seen_runs", {}).get(k, 0)
            partial = f" ({seen}/{sc[n]['completed_runs']} runs)" if seen < sc[n]["completed_runs"] * 0.9 else ""
            cells.append("–" if v is None else f"{v}{partial}")
        bt.add_row(k, *cells)
    if names:
        console.print(bt)

    raw = result.get("raw")
    if raw:
        rt = Table(title="C: raw JetStream appends (scratch stream, same nats-server)")
        for c in (
            "mode",
            "events",
            "events/s",
            "nats-server µs/event",
            "client µs/event",
            "other load",
            "reference (infra doc)",
        ):
            rt.add_column(c, justify="right" if c != "mode" else "left")
        a, p = raw["eventlog_append_actors"], raw["publish_async_w256"]
        rt.add_row(
            f"EventLog.append, {raw['actors']} OCC actors",
            f"{a['events']:,}",
            f"{a['events_per_s']:,}",
            str(a["nats_cpu_us_per_event"]),
            str(a["client_cpu_us_per_event"]),
            str(a["other_load_cores"]),
            "15.8k (asyncio) / 19.9k (uvloop)",
        )
        b = raw["eventlog_append_batch3_actors"]
        rt.add_row(
            f"EventLog.append 3-event atomic batch, {raw['actors']} actors",
            f"{b['decisions']:,} × 3",
            f"{b['events_per_s']:,} ({b['decisions_per_s']:,} batches/s)",
            f"{b['nats_cpu_us_per_decision'] / 3:.1f}",
            f"{b['client_cpu_us_per_decision'] / 3:.1f}",
            str(b["other_load_cores"]),
            "17.1k (100-msg batches)",
        )
        rt.add_row(
            "js.publish_async window 256",
            f"{p['events']:,}",
            f"{p['events_per_s']:,}",
            str(p["nats_cpu_us_per_event"]),
            str(p["client_cpu_us_per_event"]),
            str(p["other_load_cores"]),
            "28.3k (asyncio)",
        )
        console.print(rt)

    if "F" in sc:
        f = sc["F"]
        ft = Table(title=f"F: one thread, {f['runs']} runs (server CPU per run, every hundred runs)")
        for c in ("runs", "server CPU ms/run", "p50 ms", "runs/s"):
            ft.add_column(c, justify="right")
        ws = f["windows"]
        for w in ws[:3] + ws[3:-3:10] + ws[-3:] if len(ws) > 6 else ws:
            ft.add_row(w["runs"], str(w["server_ms_per_run"]), str(w["p50_ms"]), str(w["runs_per_s"]))
        console.print(ft)
        console.print(f"F reads (p50 ms) after the first 100 and at the end: {f['reads_ms']}")
    if "E" in sc:
        e = sc["E"]
        console.print(
            f"E: {e['threads']} threads idle: RSS MB {e['rss_mb']}, Redis {e['redis_bytes_per_idle_thread']} B/thread"
        )

    vt = Table(title=f"Targets vs peer ({PEER['name']}: ~50 runs/s at 50 threads, ~1 s p50, 17–20 ms CPU/run)")
    vt.add_column("target")
    vt.add_column("value", justify="right")
    vt.add_column("goal", justify="right")
    vt.add_column("result")
    for v in result["targets"]:
        vt.add_row(
            v["target"],
            "–" if v["value"] is None else str(v["value"]),
            v["goal"],
            "[green]PASS[/]" if v["pass"] else "[red]FAIL[/]",
        )
    console.print(vt)
