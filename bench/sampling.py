"""What the stack costs while a scenario runs: CPU and RSS of its processes, the workers' own counters."""

from __future__ import annotations

import asyncio
import collections
import contextlib

import httpx
import psutil

from treadle.cli.stack import WORKERS, Stack
from treadle.ops.servers import NatsServer


class Procs:
    """The stack's processes by name; CPU includes reaped children and live descendants (git, runtimes)."""

    def __init__(self, stack: Stack) -> None:
        self.pids: dict[str, int] = {}
        for name in WORKERS:
            pid = stack.processes.pid(name)
            if pid is not None:
                self.pids[name] = pid
        if isinstance(stack.nats, NatsServer) and stack.nats.pid:  # a cluster's nodes are not sampled
            self.pids["nats-server"] = stack.nats.pid
        if stack.redis is not None and stack.redis.pid:
            self.pids["redis-server"] = stack.redis.pid
        self._procs = {name: psutil.Process(pid) for name, pid in self.pids.items()}
        self.me = psutil.Process()

    @staticmethod
    def _cpu(p: psutil.Process) -> float:
        try:
            t = p.cpu_times()
            total = t.user + t.system + t.children_user + t.children_system
            return total + sum(Procs._own(c) for c in Procs._descendants(p))
        except psutil.Error:
            return float("nan")

    def cpu(self) -> dict[str, float]:
        out = {name: self._cpu(p) for name, p in self._procs.items()}
        t = self.me.cpu_times()
        out["bench-client"] = t.user + t.system
        return out

    def cpu_apart(self) -> dict[str, float]:
        """As ``cpu``, with the provider host's live descendants (its runtimes in their sandboxes) apart as
        ``runtimes``, and the bench's own children that are not the stack's (a runtime it drives directly) as
        ``direct runtime``: what a real turn costs Treadle, set against what the runtime itself costs."""
        out = self.cpu()
        host = self._procs.get("provider-host")
        out["runtimes"] = sum(self._own(c) for c in self._descendants(host)) if host else 0.0
        out["provider-host"] -= out["runtimes"]
        stack = set(self.pids.values())
        for p in self._procs.values():
            stack.update(c.pid for c in self._descendants(p))
        out["direct runtime"] = sum(self._own(c) for c in self._descendants(self.me) if c.pid not in stack)
        return out

    @staticmethod
    def _descendants(p: psutil.Process) -> list[psutil.Process]:
        try:
            return p.children(recursive=True)
        except psutil.Error:
            return []

    @staticmethod
    def _own(p: psutil.Process) -> float:
        try:
            t = p.cpu_times()
            return t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            return 0.0

    @staticmethod
    def machine_busy() -> float:
        """CPU seconds the whole machine has been busy (to spot other load sharing the cores)."""
        t = psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)

    def rss(self) -> dict[str, int]:
        out = {}
        for name, p in self._procs.items():
            with contextlib.suppress(psutil.Error):
                out[name] = p.memory_info().rss
        return out


class RssSampler:
    def __init__(self, procs: Procs, interval: float = 0.2) -> None:
        self._procs = procs
        self._interval = interval
        self.peak: dict[str, int] = {}
        self.start: dict[str, int] = {}
        self.samples = 0
        self._task: asyncio.Task | None = None

    def _sample(self) -> None:
        for name, rss in self._procs.rss().items():
            self.start.setdefault(name, rss)
            if rss > self.peak.get(name, 0):
                self.peak[name] = rss
        self.samples += 1

    async def _loop(self) -> None:
        while True:
            self._sample()
            await asyncio.sleep(self._interval)  # sampling period

    def __enter__(self) -> RssSampler:
        self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()
        self._sample()


def other_load(cpu0: dict[str, float], cpu1: dict[str, float], busy0: float, dt: float) -> float:
    ours = sum(cpu1[k] - cpu0[k] for k in cpu0)
    return round((Procs.machine_busy() - busy0 - ours) / dt, 2)


async def scrape_metrics(stack: Stack) -> dict[str, float]:
    """The workers' own Prometheus counters (conflicts, retries, dead letters, checkpoint time), summed."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = (
        "treadle_append_conflicts",
        "treadle_handler_retries",
        "treadle_dead_letters",
        "treadle_events_appended",
        "treadle_checkpoint_capture_seconds",
        "treadle_commands",
    )
    out: dict[str, float] = collections.defaultdict(float)
    async with httpx.AsyncClient(timeout=5.0) as http:
        for port in stack.health_ports.values():
            try:
                text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            except httpx.HTTPError:
                continue
            for family in text_string_to_metric_families(text):
                if not family.name.startswith(wanted):
                    continue
                for sample in family.samples:
                    if sample.name.endswith("_created") or sample.name.endswith("_bucket"):
                        continue
                    labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                    out[f"{sample.name}{{{labels}}}" if labels else sample.name] += sample.value
    return dict(out)
