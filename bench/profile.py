"""Where the time goes under the scenario-B load: a diagnostic companion of ``bench/run.py`` (not run by make).

    .venv/bin/python bench/profile.py cpu   [--threads 50] [--seconds 12] [--sample 8]
    .venv/bin/python bench/profile.py cpu --threads 1 --grow 2000   # scenario F: one long thread
    .venv/bin/python bench/profile.py trace [--threads 50] [--seconds 6]
    .venv/bin/python bench/profile.py cpu --threads 10 --files 10000   # scenario D: a file written per run

``cpu``: while B-style load runs, ``py-spy record`` samples every worker (needs ``pip install py-spy`` into the
venv; it is not a project dependency) and ``perf record`` samples nats-server if perf is installed. Prints the
top functions per process, by own time and by inclusive time.

``trace``: a wiretap subscribed to ``>`` on the stack's NATS (``bench/wiretap.py``, a process of its own) records
every message with a timestamp; for a few runs in the middle of the load it prints the message timeline of the run's
thread (commands, JetStream API calls, appends, pull requests, deliveries, acks, replies) relative to the POST, and a
per-hop latency summary over all runs.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nats  # noqa: E402
from client import ThreadClient, create_threads, http_client, open_threads  # noqa: E402
from file_runs import populate  # noqa: E402
from harness import TENANT, Env, Output  # noqa: E402
from redis.asyncio import Redis  # noqa: E402
from sampling import Procs  # noqa: E402
from scenarios import warm_up  # noqa: E402
from wiretap import Wiretap  # noqa: E402

from treadle.cli.stack import WORKERS, Stack  # noqa: E402
from treadle.ops.tokens import TokenStore  # noqa: E402

VENV_BIN = Path(sys.executable).parent


async def start(threads: int) -> tuple[Stack, Env, Output, Path]:
    output = Output()
    tmp = Path(tempfile.mkdtemp(prefix="treadle-profile-"))
    stack = Stack(tmp / "state", on_output=output)
    try:
        await stack.start()
    except BaseException:
        output.dump()
        await stack.stop()
        raise
    nc = await nats.connect(stack.nats_url, name="treadle-bench")
    token = await TokenStore(nc.jetstream()).create(TENANT, "bench")
    http = http_client(stack.api_url, token, 32)
    env = Env(stack, Procs(stack), http, Redis.from_url(stack.redis_url), nc, nc.jetstream())
    return stack, env, output, tmp


async def stop(stack: Stack, env: Env | None, tmp: Path) -> None:
    if env is not None:
        await env.http.aclose()
        with contextlib.suppress(Exception):
            await env.redis.aclose()
        with contextlib.suppress(Exception):
            await env.nc.close()
    await stack.stop()
    shutil.rmtree(tmp, ignore_errors=True)


async def load(
    env: Env,
    threads: int,
    seconds: float,
    results: list,
    started: asyncio.Event | None = None,
    grow: int = 0,
    files: int = 0,
):
    """``files``: scenario D's load instead (file_runs.py): workspaces of that many files, a file written per run."""
    errors: collections.Counter[str] = collections.Counter()
    names = [f"bench-d-{i}" for i in range(threads)] if files else None
    for name in names or []:
        populate(env.stack.state_dir / "workspaces" / TENANT / name, files)
    ids = await create_threads(env.http, threads, errors, names)
    clients = await open_threads(env.http, ids, errors)
    runs = itertools.count()

    def script() -> dict | None:
        if not files:
            return None
        path = f"out/run_{next(runs)}.txt"
        return {"steps": [{"type": "write_file", "path": path, "content": "run\n"}, {"type": "text", "text": "ok"}]}

    if files:  # the first capture of a workspace commits all of it: not what a run costs after
        await asyncio.gather(*(c.run_once("first capture", script()) for c in clients))
    for i in range(grow):  # scenario F: profile threads already this many runs long
        await asyncio.gather(*(c.run_once("growing the thread") for c in clients))
        if i % 500 == 499:
            print(f"grown to {i + 1} runs", file=sys.stderr)
    if started:
        started.set()
    deadline = time.perf_counter() + seconds

    async def loop(c: ThreadClient) -> None:
        while time.perf_counter() < deadline:
            o = await c.run_once("please summarise the benchmark plan in one short paragraph", script())
            if o is not None:
                results.append((c.id, o))

    t0 = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in clients))
    elapsed = time.perf_counter() - t0
    for c in clients:
        await c.close()
    return elapsed, errors


# --- cpu ------------------------------------------------------------------------------------------------

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+)(?::\d+)?\)$")


def _short(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m.group("file")
    for marker in ("site-packages/", "libs/", "services/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{m.group('func')} ({path})"


def summarise_raw(path: Path, top: int) -> tuple[int, list, list]:
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = [_short(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    return total, own.most_common(top), incl.most_common(top * 2)


def perf_report(data: Path, top: int) -> list[str]:
    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "symbol", "--percent-limit", "0.8"],
        capture_output=True,
        text=True,
    )
    rows = [
        line
        for line in out.stdout.splitlines()
        if line.strip()
        and not line.startswith("#")
        and "%" in line
        and not line.lstrip().startswith("|")
        and not line.lstrip().startswith("-")
    ]
    return rows[:top]


async def cpu(args: argparse.Namespace) -> None:
    stack, env, output, tmp = await start(args.threads)
    procs: list[subprocess.Popen] = []
    try:
        await warm_up(env)
        results: list = []
        started = asyncio.Event()
        task = asyncio.create_task(load(env, args.threads, args.seconds, results, started, args.grow, args.files))
        await started.wait()
        await asyncio.sleep(2)  # skip the ramp-up
        outdir = Path(tempfile.mkdtemp(prefix="treadle-pyspy-"))
        files = {}
        cpu0 = env.procs.cpu()
        targets = {n: pid for n, pid in env.procs.pids.items() if n in WORKERS}
        targets["bench-client"] = os.getpid()
        for name, pid in targets.items():
            if True:
                files[name] = outdir / f"{name}.txt"
                procs.append(
                    subprocess.Popen(
                        [
                            os.environ.get("PY_SPY", str(VENV_BIN / "py-spy")),  # or a py-spy of its own venv
                            "record",
                            "--pid",
                            str(pid),
                            "--duration",
                            str(int(args.sample)),
                            "--rate",
                            "200",
                            "--format",
                            "raw",
                            "--nonblocking",
                            "--output",
                            str(files[name]),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        perf_data = outdir / "nats.perf"
        if shutil.which("perf") and "nats-server" in env.procs.pids:
            procs.append(
                subprocess.Popen(
                    [
                        "perf",
                        "record",
                        "-F",
                        "499",
                        "-g",
                        "-p",
                        str(env.procs.pids["nats-server"]),
                        "-o",
                        str(perf_data),
                        "--",
                        "sleep",
                        str(int(args.sample)),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        for p in procs:
            await asyncio.to_thread(p.wait)
        cpu1 = env.procs.cpu()
        elapsed, errors = await task
        done = [o for _, o in results if o.status == "run.completed"]
        print(f"\nload: {len(done)} runs in {elapsed:.1f}s = {len(done) / elapsed:.1f} runs/s, errors {dict(errors)}")
        print("CPU seconds during the sampling window (includes the profilers' perturbation):")
        for k in cpu0:
            print(f"  {k:14} {cpu1[k] - cpu0[k]:6.2f}s")
        for name, f in files.items():
            if not f.exists():
                print(f"\n== {name}: no py-spy output")
                continue
            total, own, incl = summarise_raw(f, args.top)
            print(f"\n== {name}: {total} samples at 200 Hz ≈ {total / 200:.2f} CPU-s over {args.sample}s")
            print("  own time:")
            for fn, n in own:
                print(f"    {100 * n / total:5.1f}%  {fn}")
            print("  inclusive:")
            for fn, n in incl:
                print(f"    {100 * n / total:5.1f}%  {fn}")
        if perf_data.exists():
            print("\n== nats-server (perf, own time by symbol)")
            for row in perf_report(perf_data, args.top * 2):
                print("   ", row.strip())
        print(f"\nraw profiles kept in {outdir}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        await stop(stack, env, tmp)


# --- trace ----------------------------------------------------------------------------------------------

_PARTITION = re.compile(r"-p\d+$")


def classify(subject: str) -> str:
    """The kind of a NATS message, the partitions of one consumer counted together (``projector-p3`` →
    ``projector``) and thread subjects by their first two tokens."""
    if subject.startswith("$JS.API.DIRECT.GET"):
        return "direct-get"
    if subject.startswith("$JS.API.CONSUMER.MSG.NEXT"):
        return "pull-request:" + _PARTITION.sub("", subject.split(".")[-1])
    if subject.startswith("$JS.ACK"):
        return "ack:" + _PARTITION.sub("", subject.split(".")[3])
    if subject.startswith(("treadle.evt.", "treadle.prov.", "treadle.live.")):
        return ".".join(subject.split(".")[:2])
    if subject.startswith("$JS.API"):
        return "js-api:" + ".".join(subject.split(".")[2:4])
    if subject.startswith("$KV"):
        return "kv:" + subject.split(".")[1]
    if subject.startswith("_INBOX") or subject.startswith("$JS") is False and "INBOX" in subject:
        return "reply"
    return subject


async def trace(args: argparse.Namespace) -> None:
    stack, env, output, tmp = await start(args.threads)
    tap = None
    try:
        await warm_up(env)
        tap = await Wiretap.start(stack.nats_url)  # a process of its own: its times are not the bench loop's
        results: list = []
        elapsed, errors = await load(env, args.threads, args.seconds, results, files=args.files)
        records = await tap.stop()
        tap = None
        done = [(t, o) for t, o in results if o.status == "run.completed"]
        print(
            f"\nload: {len(done)} runs in {elapsed:.1f}s = {len(done) / elapsed:.1f} runs/s; {len(records)} NATS messages "
            f"= {len(records) / max(1, len(done)):.0f} per run; errors {dict(errors)}"
        )
        kinds = collections.Counter(classify(s) for _, s, *_ in records)
        print("NATS messages per run by kind:")
        for k, n in kinds.most_common(40):
            print(f"  {n / max(1, len(done)):7.2f}  {k}")

        # label every message of a run's thread; deliveries (reply $JS.ACK…) and their acks by consumer
        thread_re = re.compile(rb'"thread":"(thr_[a-z0-9]+)"')
        type_re = re.compile(rb'"type":"([a-z_.]+)"')
        delivered: dict[str, tuple[str, str]] = {}
        labelled: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
        for i, (_, subject, reply, data, _) in enumerate(records):
            thread = label = None
            if subject.startswith(("treadle.evt.", "treadle.prov.", "treadle.live.")):
                parts = subject.split(".")
                thread = parts[3]
                what = (
                    subject.split(".", 4)[4]
                    if parts[1] == "evt"
                    else "live"
                    if parts[1] == "live"
                    else "prov:" + (m.group(1).decode() if (m := type_re.search(data)) else "?")
                )
                if reply and reply.startswith("$JS.ACK"):
                    tok = reply.split(".")
                    consumer = tok[3] if len(tok) == 9 else tok[5]
                    consumer = (
                        consumer if not consumer.startswith(("_", "OC")) and len(consumer) < 40 else "ordered/sse"
                    )
                    label = f"deliver[{consumer}] {what}"
                    delivered[reply] = (thread, f"ack[{consumer}] {what}")
                elif parts[1] == "live":
                    label = "live.delta publish"
                else:
                    label = f"append {what}" if parts[1] == "evt" else f"publish {what}"
            elif subject.startswith("$JS.ACK") and subject in delivered:
                thread, label = delivered[subject]
            elif subject.startswith(("treadle.cmd.", "treadle.host.", "treadle.ckpt.")):
                m = thread_re.search(data)
                if m:
                    thread = m.group(1).decode()
                    label = "request " + ".".join(subject.split(".")[:2] + subject.split(".")[-2:])
            if thread and label:
                labelled[thread].append((i, label))
        hop: dict[str, list[float]] = collections.defaultdict(list)
        samples = 0
        for thread, o in done:
            seen: dict[str, float] = {}
            for i, label in labelled.get(thread, []):
                t = records[i][0]
                if o.t0 <= t <= (o.end or 0):
                    seen.setdefault(label, t - o.t0)
            for k, v in seen.items():
                hop[k].append(v)
            samples += bool(seen)
        print(f"\nmedian ms from POST until the first NATS message of each kind for the run's thread ({samples} runs):")
        for hop_name, times in sorted(hop.items(), key=lambda kv: statistics.median(kv[1])):
            if len(times) < samples / 3:
                continue
            times.sort()
            print(
                f"  {statistics.median(times) * 1000:8.1f}  p90 {times[int(0.9 * (len(times) - 1))] * 1000:7.1f}"
                f"   {hop_name}  (n={len(times)})"
            )

        # full timelines of a few runs in the middle, with the replies to each request
        by_reply: dict[str, int] = {}
        for i, (_, _, reply, _, _) in enumerate(records):
            if reply and not reply.startswith("$JS.ACK"):
                by_reply.setdefault(reply, i)
        replies_to: dict[int, list[int]] = collections.defaultdict(list)
        for i, (_, subject, _, _, _) in enumerate(records):
            j = by_reply.get(subject)
            if j is not None and j < i:
                replies_to[j].append(i)
        picks = done[len(done) // 2 : len(done) // 2 + args.timelines]
        picks += sorted(done, key=lambda to: to[1].end - to[1].t0)[-args.slowest :] if args.slowest else []
        for thread, o in picks:
            print(
                f"\n--- timeline of a run on {thread} (POST at 0; 202 at {1000 * (o.accepted - o.t0):.1f} ms, "
                f"run.completed on SSE at {1000 * (o.end - o.t0):.1f} ms)"
            )
            for i, label in labelled.get(thread, []):
                t = records[i][0]
                if not o.t0 - 0.005 <= t <= (o.end or 0) + 0.005:
                    continue
                headers = records[i][4] or {}
                h = " ".join(
                    f"{k.replace('Nats-', '')}={v}"
                    for k, v in headers.items()
                    if k in ("Nats-Batch-Sequence", "Nats-Batch-Commit", "Nats-Expected-Last-Subject-Sequence")
                )
                print(f"  {1000 * (t - o.t0):8.2f} ms  {label}  {h}")
                for j in replies_to.get(i, []):
                    print(f"  {1000 * (records[j][0] - o.t0):8.2f} ms     └ reply {len(records[j][3])}B")
    finally:
        if tap is not None:
            with contextlib.suppress(Exception):
                await tap.stop(0)
        await stop(stack, env, tmp)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["cpu", "trace"])
    p.add_argument("--threads", type=int, default=50)
    p.add_argument("--seconds", type=float, default=12.0)
    p.add_argument("--sample", type=int, default=8, help="cpu: seconds of py-spy/perf sampling")
    p.add_argument("--top", type=int, default=18)
    p.add_argument("--grow", type=int, default=0, help="cpu: runs on each thread before sampling (F: --threads 1)")
    p.add_argument("--files", type=int, default=0, help="scenario D: workspaces of this many files (D: --threads 10)")
    p.add_argument("--timelines", type=int, default=2, help="trace: timelines of runs from the middle")
    p.add_argument("--slowest", type=int, default=0, help="trace: also the timelines of the N slowest runs")
    args = p.parse_args()
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(cpu(args) if args.mode == "cpu" else trace(args))


if __name__ == "__main__":
    main()
