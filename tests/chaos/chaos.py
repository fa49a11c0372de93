"""What the chaos test and the soak share: a seeded killer, sends that survive a gateway being killed, and the
verdict over the log (every message one completed run, in order, with its whole reply) and over Redis (the
``treadle check`` command, run as an operator would)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.support.api import Api
from tests.support.helpers import wait_for
from treadle.cli.stack import Stack
from treadle.core import events as ev
from treadle.ops.servers import NatsCluster

TREADLE = Path(sys.executable).parent / "treadle"


@dataclass
class Killer:
    """Sends SIGKILL or SIGTERM to a random worker process at random times and, when the stack runs a NATS
    cluster, SIGKILLs one node at a time at other random times and starts it again after a while (a node
    killed this way is a deliberate outage, left down until then). Optionally also: kill -9 of redis-server
    (the stack restarts it), kill -9 of one runtime process under a provider host (``runtimes``: markers in its
    command line, e.g. ``app-server``, ``/claude``), and once a graceful stop and start of the whole stack (what
    SIGTERM to ``treadle up`` and a new ``treadle up`` do). The choices (whom, which signal, how long to wait)
    come from rngs seeded by ``seed``, so a failing run names the seed that reproduces them."""

    stack: Stack
    seed: int
    pause: tuple[float, float] = (2.0, 5.0)  # seconds between kills (the rhythm is the scenario, not a wait)
    signals: Sequence[int] = (signal.SIGKILL, signal.SIGKILL, signal.SIGTERM)
    names: Sequence[str] | None = None  # default: every worker process of the stack
    node_pause: tuple[float, float] = (6.0, 12.0)  # seconds between NATS node kills
    node_down: tuple[float, float] = (1.0, 4.0)  # seconds a killed node stays down
    redis_pause: tuple[float, float] | None = None  # seconds between kill -9s of redis-server (None: never)
    runtimes: Sequence[str] = ()  # runtime processes to kill -9 one at a time (none: the scripted provider)
    runtime_pause: tuple[float, float] = (4.0, 8.0)
    restart_after: float | None = None  # seconds in: one graceful restart of the whole stack (None: never)
    # Seconds in: one workspace node lost (kill -9 of its hosts and checkpoint service, its directory deleted),
    # back, empty, ``node_loss_down`` seconds later, whatever else happens (None: never; needs a stack of several
    # workspace nodes).
    node_loss_after: float | None = None
    node_loss_down: float = 5.0
    kills: list[tuple[str, str]] = field(default_factory=list)
    calm: asyncio.Lock = field(default_factory=asyncio.Lock)  # each act holds it: nothing overlaps the restart

    async def run(self, stop: asyncio.Event) -> None:
        acts = [self._workers(stop)]
        if isinstance(self.stack.nats, NatsCluster):
            acts.append(self._nodes(stop))
        if self.redis_pause is not None:
            acts.append(self._redis(stop))
        if self.runtimes:
            acts.append(self._runtimes(stop))
        if self.restart_after is not None:
            acts.append(self._restart(stop))
        if self.node_loss_after is not None and len(self.stack.nodes) > 1:
            acts.append(self._node_loss(stop))
        await asyncio.gather(*acts)

    async def _workers(self, stop: asyncio.Event) -> None:
        rng = random.Random(self.seed)
        names = sorted(self.names or self.stack.health_ports)
        while await _pause(stop, rng.uniform(*self.pause)):
            name, sig = rng.choice(names), rng.choice(self.signals)
            async with self.calm:
                self.kills.append((name, signal.Signals(sig).name))
                await self.stack.processes.kill(name, sig, timeout=30)

    async def _redis(self, stop: asyncio.Event) -> None:
        """An operator's kill -9 of redis-server: nothing but the stack's supervision brings it back."""
        rng = random.Random(f"{self.seed}/redis")
        assert self.redis_pause is not None and self.stack.redis is not None
        while await _pause(stop, rng.uniform(*self.redis_pause)):
            async with self.calm:
                pid = self.stack.redis.pid
                if pid is not None:
                    self.kills.append(("redis-server", "SIGKILL"))
                    os.kill(pid, signal.SIGKILL)

    async def _runtimes(self, stop: asyncio.Event) -> None:
        """kill -9 of one runtime process (a ``codex app-server``, a Claude CLI) alone; its host lives on."""
        rng = random.Random(f"{self.seed}/runtimes")
        while await _pause(stop, rng.uniform(*self.runtime_pause)):
            async with self.calm:
                found = sorted(self._runtime_pids().items())
                if found:
                    pid, marker = rng.choice(found)
                    self.kills.append((f"runtime:{marker}", "SIGKILL"))
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    def _runtime_pids(self) -> dict[int, str]:
        found: dict[int, str] = {}
        for name in self.stack.host_processes.values():
            host = self.stack.processes.pid(name)
            if host is None:
                continue
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(host).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        head = child.cmdline()[:2]
                        marker = next((m for m in self.runtimes if any(m in part for part in head)), None)
                        if marker is not None:
                            found[child.pid] = marker
        return found

    async def _restart(self, stop: asyncio.Event) -> None:
        """Once: SIGTERM to everything, as to ``treadle up``, then a start on the same state."""
        assert self.restart_after is not None
        if await _pause(stop, self.restart_after):
            async with self.calm:
                self.kills.append(("stack", "restart"))
                await self.stack.restart()

    async def _node_loss(self, stop: asyncio.Event) -> None:
        """Once: a workspace node's machine and disk are lost. Its threads move by themselves (the coordinator's
        watch of lost volumes); the node comes back empty while the other acts go on."""
        assert self.node_loss_after is not None
        volume = random.Random(f"{self.seed}/volumes").choice(sorted(self.stack.nodes))
        if not await _pause(stop, self.node_loss_after):
            return
        async with self.calm:
            self.kills.append((f"volume:{volume}", "lost"))
            for name in sorted(n for n, v in self.stack.volume_of.items() if v == volume):
                await self.stack.processes.halt(name)
            shutil.rmtree(self.stack.nodes[volume], ignore_errors=True)
        await asyncio.sleep(self.node_loss_down)  # down that long even past the talking: its threads must move
        async with self.calm:
            self.stack.nodes[volume].mkdir(parents=True, exist_ok=True)
            await self.stack.processes.start()  # only the halted ones are not running

    async def _nodes(self, stop: asyncio.Event) -> None:
        """One node down at a time: a cluster of three keeps its quorum, and the node comes back with its data
        (it catches up from the others) before the next one may go."""
        cluster = self.stack.nats
        assert isinstance(cluster, NatsCluster)
        rng = random.Random(f"{self.seed}/nats")
        while await _pause(stop, rng.uniform(*self.node_pause)):
            name = rng.choice(cluster.names)
            self.kills.append((f"nats:{name}", "SIGKILL"))
            async with self.calm:
                node = cluster.node(name)
                node.kill()
                try:
                    await _pause(stop, rng.uniform(*self.node_down))
                finally:
                    await node.start()
                    await cluster.wait_healthy()

    def story(self) -> str:
        return f"seed {self.seed}, {len(self.kills)} kills: " + ", ".join(f"{n}/{s}" for n, s in self.kills)


async def _pause(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` unless ``stop`` comes first; whether to go on."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
        return False
    except TimeoutError:
        return True


@dataclass
class Throughput:
    """Messages completed under churn: how many per second, and each one's latency from its send until its run
    was seen completed (queueing behind the thread's earlier messages included). Printed, never asserted."""

    started: float = field(default_factory=time.monotonic)
    latencies: list[float] = field(default_factory=list)
    ended: float | None = None

    def completed(self, sent_at: float) -> None:
        self.latencies.append(time.monotonic() - sent_at)

    def stop(self) -> None:
        self.ended = time.monotonic()

    def summary(self) -> str:
        took = (self.ended or time.monotonic()) - self.started
        done = sorted(self.latencies) or [0.0]
        p50, p95 = (done[min(len(done) - 1, int(q * len(done)))] for q in (0.50, 0.95))
        return (
            f"{len(self.latencies)} messages completed in {took:.0f} s ({len(self.latencies) / took:.1f}/s), "
            f"latency p50 {p50:.2f} s, p95 {p95:.2f} s"
        )


class WorkerOutput:
    """Every line the workers print, kept in a file next to the test's stack (what a failure is read from);
    errors and tracebacks are echoed as they come (or everything with TREADLE_TEST_VERBOSE)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = None

    def __enter__(self) -> WorkerOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()

    def mentioning(self, *needles: str, last: int = 30) -> str:
        """The last lines naming any of ``needles`` (a stuck run's id, its thread): the story of what each worker
        did with it, in the failure itself (pytest keeps only its last few temporary directories)."""
        if self._file is not None:
            self._file.flush()
        if not self.path.exists():
            return ""
        with self.path.open() as f:
            lines = [line for line in f if any(n in line for n in needles)]
        return "".join(lines[-last:])

    def __call__(self, name: str, line: str) -> None:
        if self._file is None:
            self._file = self.path.open("a", buffering=1)
        self._file.write(f"{name} | {line}\n")
        if os.environ.get("TREADLE_TEST_VERBOSE") or " ERROR " in line or "Traceback" in line:
            print(f"{name} | {line}")


async def send(api: Api, thread: str, text: str, **body) -> dict:
    """POST a message once, whatever happens to the gateway or coordinator meanwhile: every retry carries the
    same Idempotency-Key, so a send that was accepted before its answer was lost is not accepted again."""
    headers = {"Idempotency-Key": uuid.uuid4().hex}

    async def attempt():
        r = await api.request("POST", f"/v1/threads/{thread}/messages", json={"text": text, **body}, headers=headers)
        if r.status_code >= 500:  # a worker behind the gateway is restarting: the same request again
            return None
        assert r.status_code == 202, f"{r.status_code} {r.text}"
        return r.json()

    return await wait_for(attempt, timeout=120, interval=0.1, what=f"message {text!r} accepted")


def verdict(events: Sequence[ev.Envelope], sent: Sequence[str], reply: str | Callable[[str], str]) -> list[str]:
    """What went wrong on one thread, judged from its log alone (empty: nothing). ``sent``: the texts sent to
    it, in order. Each must have opened exactly one run; runs ran one after the other in that order (each
    started after its predecessor ended); each completed once, with exactly one final reply, the whole of it
    (``reply``, or ``reply(text)`` of the message's text)."""
    wrong: list[str] = []
    queued = [e.data for e in events if isinstance(e.data, ev.RunQueued)]
    texts = [q.text for q in queued]
    if texts != list(sent):
        wrong.append(f"runs were opened for {texts}, the messages sent were {list(sent)}")
    ordinals = {q.run_id: q.ordinal for q in queued}
    ended = [(e.seq, e.data) for e in events if isinstance(e.data, ev.RunEnded)]
    if sorted(d.run_id for _, d in ended) != sorted(ordinals):
        wrong.append(f"runs ended {[d.run_id for _, d in ended]}, runs queued {list(ordinals)}")
    for _, d in ended:
        if not isinstance(d, ev.RunCompleted):
            wrong.append(f"run {d.run_id} (ordinal {ordinals.get(d.run_id)}) ended {d.TYPE}: {d.error}")
    order = [ordinals.get(d.run_id) for _, d in ended]
    if order != sorted(order):
        wrong.append(f"runs ended in ordinal order {order}")
    end_seq = {d.run_id: seq for seq, d in ended}
    by_ordinal = sorted(ordinals, key=ordinals.__getitem__)
    for before, after in zip(by_ordinal, by_ordinal[1:]):
        starts = [e.seq for e in events if _started(e.data) and e.data.run_id == after]
        if starts and before in end_seq and starts[0] < end_seq[before]:
            wrong.append(f"run {after} started at seq {starts[0]}, before run {before} ended at {end_seq[before]}")
    finals = {}
    for e in events:
        # a run's end may carry its turn's last message (RunEnded.message) instead of a message.completed
        completed = e.data.message if isinstance(e.data, ev.RunEnded) else e.data
        if isinstance(completed, ev.MessageCompleted):
            finals.setdefault((completed.run_id, completed.attempt_id), []).append(completed.text)
    for _, d in ended:
        got = finals.get((d.run_id, d.attempt_id), [])
        text = next((q.text for q in queued if q.run_id == d.run_id), "")
        if got != [reply(text) if callable(reply) else reply]:
            wrong.append(f"run {d.run_id}'s final attempt replied {[t[:40] for t in got]}, not the one whole reply")
    return wrong


async def treadle_check(stack: Stack, *args: str, settle: float = 60) -> tuple[int, dict]:
    """``treadle check --json`` against the stack, as a separate process (the projector may still be catching
    up after the last kill: ``--settle`` lets it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")}
    proc = await asyncio.create_subprocess_exec(
        str(TREADLE),
        "check",
        "--json",
        "--settle",
        str(settle),
        "--nats-url",
        stack.nats_url,
        "--redis-url",
        stack.redis_url,
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), settle + 120)
    assert out, err.decode()
    return proc.returncode, json.loads(out)


def problems(report: dict) -> Iterable[str]:
    return (f"seq {p['seq']} {p['kind']}: {p['detail']} [{p['subject']}]" for p in report["problems"][:30])


def _started(d: ev.Payload) -> bool:
    """A run's start: its run.started, its first text carrying it (``MessageDelta.started``), or its end carrying
    it (``RunEnded.started``, a turn over at once)."""
    return isinstance(d, ev.RunStarted) or (isinstance(d, (ev.RunEnded, ev.MessageDelta)) and d.started is not None)
