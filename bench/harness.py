"""The stack under test as the scenarios see it: the bench tenant, the log line, the workers' output, `Env`."""

from __future__ import annotations

import collections
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx
from redis.asyncio import Redis
from sampling import Procs

from treadle.cli.stack import Stack

TENANT = "bench"

# One token plays every simulated UI (50 SSE streams in B): the per-token stream limit (20 by default) would
# refuse the 21st. The workers inherit this environment.
os.environ.setdefault("TREADLE_GATEWAY_MAX_STREAMS_PER_TOKEN", "0")
os.environ.setdefault("TREADLE_GATEWAY_MAX_STREAMS_PER_TENANT", "0")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Output:
    """Keeps the stack quiet: the last lines of every process, and counts of warnings and errors."""

    def __init__(self) -> None:
        self.tail: collections.deque[str] = collections.deque(maxlen=300)
        self.warnings: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()

    def __call__(self, name: str, line: str) -> None:
        self.tail.append(f"{name} | {line}")
        if " WARNING " in line:
            self.warnings[name] += 1
        elif " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback"):
            self.errors[name] += 1

    def dump(self, lines: int = 60) -> None:
        for line in list(self.tail)[-lines:]:
            print(line, file=sys.stderr)


@dataclass
class Env:
    """What every scenario drives: the stack, its processes, an HTTP client for thread creation, Redis, NATS."""

    stack: Stack
    procs: Procs
    http: httpx.AsyncClient
    redis: Redis
    nc: Any
    js: Any
