"""How long `treadle backup` and `restore` take on a log of a given size: a nats-server with Treadle's streams,
N threads of M events each appended through the event log, then a backup of every stream and a restore into
a second, empty nats-server (both on this machine's loopback, in temporary directories).

    scripts/loopback-only.sh .venv/bin/python bench/backup_restore.py [--threads 200] [--events 50]

Prints the events' bytes in the stream, the backup's bytes, and each step's seconds (the restore's includes
the server's own check of every message block)."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nats  # noqa: E402

from treadle.core.envelope import Envelope  # noqa: E402
from treadle.core.run.events import RunWarning  # noqa: E402
from treadle.eventlog import streams  # noqa: E402
from treadle.eventlog.log import EventLog  # noqa: E402
from treadle.ops.backup import backup, restore  # noqa: E402
from treadle.ops.servers import NatsServer  # noqa: E402


async def main(threads: int, events: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source, target = NatsServer(Path(tmp) / "a"), NatsServer(Path(tmp) / "b")
        await source.start()
        await target.start()
        try:
            nc = await nats.connect(source.url)
            await streams.ensure(nc.jetstream())
            log, at = EventLog(nc), datetime.datetime.now(datetime.UTC)
            for t in range(threads):
                thread, seq = f"thr_{t:026d}", 0
                for batch in range(0, events, 10):
                    envs = [
                        Envelope(id=f"evt_{t}_{i}", type="run.warning", tenant="bench", thread=thread, at=at,
                                 command_id="cmd", actor="bench", data=RunWarning(run_id="run_1", message="x" * 200))
                        for i in range(batch, min(batch + 10, events))
                    ]  # fmt: skip
                    seq = (
                        await log.append("bench", thread, seq, envs)
                        if seq
                        else await log.append("bench", thread, 0, envs)
                    )
            info = await nc.jetstream().stream_info("TREADLE_EVENTS")
            started = time.perf_counter()
            copied = await backup(nc, Path(tmp) / "backup")
            backed = time.perf_counter() - started
            await nc.close()
            nc = await nats.connect(target.url)
            started = time.perf_counter()
            await restore(nc, Path(tmp) / "backup")
            restored = time.perf_counter() - started
            after = await nc.jetstream().stream_info("TREADLE_EVENTS")
            await nc.close()
        finally:
            await source.stop()
            await target.stop()
    assert after.state.messages == info.state.messages and after.state.last_seq == info.state.last_seq
    print(json.dumps({
        "events": info.state.messages, "stream_bytes": info.state.bytes, "streams": len(copied),
        "backup_bytes": sum(c.bytes for c in copied), "backup_s": round(backed, 3), "restore_s": round(restored, 3),
    }))  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--events", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.threads, args.events))
