"""How long the partitions of a lost replica go unconsumed (runtime/leases.py): a stack with two replicas of
each replicated worker; the second replica of every kind is stopped (SIGTERM: it hands its partitions back)
or killed (SIGKILL: they are taken over once its records stand still for the lease TTL), and the time until
the surviving replica holds every partition is measured from the KV records.

    .venv/bin/python bench/takeover.py [--ttl 3 6] [--rounds 3]

Not part of CI; prints one line per measurement and a summary (seconds, per kind and signal).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import tempfile
import time
from pathlib import Path

import nats

from treadle.cli.stack import REPLICATED, Stack
from treadle.runtime.leases import LeaseTable

POLL = 0.02  # how finely the takeover moment is resolved


async def until(predicate, timeout: float = 60.0) -> float:
    began = time.monotonic()
    while not await predicate():
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"no takeover within {timeout:.0f}s")
        await asyncio.sleep(POLL)  # a measurement's resolution, not synchronisation
    return time.monotonic() - began


async def measure(ttl: float, rounds: int) -> dict[tuple[str, str], list[float]]:
    results: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with Stack(
            Path(tmp), env={"TREADLE_LEASE_TTL": str(ttl)}, replicas=2, on_output=lambda name, line: None
        ) as stack:
            nc = await nats.connect(stack.nats_url)
            table = await LeaseTable(nc).__aenter__()
            partitions = None
            for n in range(rounds):
                for how, sig in (("sigterm", signal.SIGTERM), ("sigkill", signal.SIGKILL)):

                    async def even() -> bool:
                        nonlocal partitions
                        for kind in REPLICATED:
                            held = table.holders(kind)
                            partitions = partitions or len(held)
                            if set(held.values()) != {kind, f"{kind}-2"}:
                                return False
                        return True

                    await until(even)
                    await stack.wait_ready()
                    names = [f"{kind}-2" for kind in REPLICATED]
                    if sig == signal.SIGKILL:
                        began = time.monotonic()
                        await asyncio.gather(*(stack.processes.halt(name) for name in names))
                    else:
                        began = time.monotonic()
                        await asyncio.gather(*(stack.processes.kill(name, sig) for name in names))

                    async def survivor_holds_all(kind: str) -> bool:
                        held = table.holders(kind)
                        return len(held) == partitions and set(held.values()) == {kind}

                    async def took(kind: str) -> None:
                        await until(lambda: survivor_holds_all(kind))
                        seconds = time.monotonic() - began  # noqa: B023 (awaited in this round, like the two below)
                        results.setdefault((kind, how), []).append(seconds)  # noqa: B023
                        print(
                            f"ttl {ttl:g}s round {n + 1} {how:7} {kind:11} taken over in {seconds:.2f}s",  # noqa: B023
                            flush=True,
                        )

                    await asyncio.gather(*(took(kind) for kind in REPLICATED))
                    if sig == signal.SIGKILL:
                        await stack.processes.start()  # brings the halted replicas back
            await table.__aexit__()
            await nc.close()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ttl", type=float, nargs="+", default=[3.0, 6.0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    summary = []
    for ttl in args.ttl:
        for (kind, how), seconds in (await measure(ttl, args.rounds)).items():
            summary.append((ttl, how, kind, statistics.median(seconds), max(seconds)))
    print("\nlease TTL  signal   kind         median  max   (seconds until the survivor holds every partition)")
    for ttl, how, kind, median, worst in sorted(summary):
        print(f"{ttl:8g}s  {how:7}  {kind:11}  {median:6.2f}  {worst:5.2f}")


if __name__ == "__main__":
    asyncio.run(main())
