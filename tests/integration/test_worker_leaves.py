"""Issue 6 (chaos seeds 31 and 37, one replica of each worker): a worker that has stopped leaves, even when some
of its work outlives cancellation. nats-py reports a ``next_msg`` cancelled on a closed connection as
``ConnectionClosedError``; a fetch loop that retries on errors then carried on, and asyncio waited for it for
ever: the supervisor logged its stop and never exited, and the process supervisor waited on it."""

from __future__ import annotations

import asyncio
import sys
import textwrap

WORKER = textwrap.dedent("""
    import asyncio
    from treadle.runtime.worker import run

    async def stubborn(started):
        started.set()
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:  # as a library that turns a cancellation into another error
                print("cancelled, carrying on", flush=True)

    async def main():
        started = asyncio.Event()
        asyncio.get_running_loop().create_task(stubborn(started), name="stubborn-loop")
        await started.wait()
        print("main done", flush=True)

    run(main)
""")


async def test_a_worker_whose_work_outlives_cancellation_still_exits():
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WORKER, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(worker.communicate(), 30)  # without the bound it never exits
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    text = out.decode()
    assert worker.returncode == 0, text
    assert "main done" in text and "cancelled, carrying on" in text
    assert "did not end when cancelled: stubborn-loop" in text
