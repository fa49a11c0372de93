"""A wiretap on ``>`` in a process of its own, for the timelines of ``bench/profile.py trace`` and
``bench/turn_hops.py``.

The tap used to be a subscription of the bench's own process, whose event loop also sends the POSTs and reads the
SSE streams: a message was timed when that loop got round to it, 1-3 ms late at the start of a turn (measured
against marks the workers wrote themselves), which made hops look slow that were not (the gateway's "3-4 ms before
the command", the coordinator's "2 ms between its append's ack and its reply"). Here the tap's loop does nothing
else. Times are ``time.perf_counter()`` (CLOCK_MONOTONIC), the same clock in every process of the machine, so they
compare with the bench's own times.

    tap = await Wiretap.start(nats_url)
    ...
    records = await tap.stop()   # [(t, subject, reply or None, data, headers or None), ...] in arrival order
"""

from __future__ import annotations

import asyncio
import pickle
import sys
import tempfile
import time
from pathlib import Path

READY = b"ready\n"


class Wiretap:
    def __init__(self, proc: asyncio.subprocess.Process, out: Path) -> None:
        self._proc, self._out = proc, out

    @classmethod
    async def start(cls, nats_url: str, subject: str = ">") -> Wiretap:
        out = Path(tempfile.mkstemp(prefix="wiretap-", suffix=".pickle")[1])
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            nats_url,
            str(out),
            subject,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)  # subscribed, and the server knows it
        if line != READY:
            proc.kill()
            raise RuntimeError(f"the wiretap did not start: {line!r}")
        return cls(proc, out)

    async def stop(self, drain: float = 0.5) -> list[tuple[float, str, str | None, bytes, dict | None]]:
        """Let what is in flight arrive for ``drain`` seconds, then end the tap and return what it recorded."""
        assert self._proc.stdin is not None
        await asyncio.sleep(drain)  # messages still on their way to the tap, not synchronisation with a worker
        self._proc.stdin.close()  # end of input: the tap writes its records and exits
        await asyncio.wait_for(self._proc.wait(), 60)
        try:
            return pickle.loads(self._out.read_bytes())
        finally:
            self._out.unlink(missing_ok=True)


async def _tap(nats_url: str, out: str, subject: str) -> None:
    import nats

    nc = await nats.connect(nats_url, name="treadle-wiretap", pending_size=512 * 1024 * 1024)
    records: list = []
    clock = time.perf_counter

    async def on_msg(msg) -> None:
        records.append((clock(), msg.subject, msg.reply or None, msg.data, msg.headers))

    await nc.subscribe(subject, cb=on_msg, pending_msgs_limit=10_000_000, pending_bytes_limit=2**31)
    await nc.flush()
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.buffer.read)  # until the bench closes our stdin
    await nc.flush()  # the server sent us every message it had routed here before this PONG
    await nc.drain()  # what the subscription holds is recorded before the connection closes
    Path(out).write_bytes(pickle.dumps(records))


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()  # the workers' loop: the tap reads as fast as they do
    except ImportError:
        pass
    asyncio.run(_tap(sys.argv[1], sys.argv[2], sys.argv[3]))
