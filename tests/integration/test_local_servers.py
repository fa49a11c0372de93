"""The local infrastructure every other integration test stands on: servers, fixtures, supervisor."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import uuid
from pathlib import Path

import nats
import psutil

from tests.support.helpers import wait_for
from treadle.ops.processes import ProcessSupervisor
from treadle.ops.servers import NatsServer, RedisServer

SLEEPER = [sys.executable, "-c", "import signal; print('ready', flush=True); signal.pause()"]


def gone(pid: int) -> bool:
    # An orphan whose new parent never reaps it stays a zombie: dead for our purposes.
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Lines:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, name: str, line: str) -> None:
        self.seen.append((name, line))

    def of(self, name: str) -> list[str]:
        return [line for n, line in self.seen if n == name]


async def test_jetstream_fixture_stores_and_returns_a_message(nc):
    js = nc.jetstream()
    stream = f"T_{uuid.uuid4().hex}"
    await js.add_stream(name=stream, subjects=[f"{stream}.>"])
    try:
        ack = await js.publish(f"{stream}.a", b"hello")
        msg = await js.get_msg(stream, ack.seq)
        assert (msg.subject, msg.data) == (f"{stream}.a", b"hello")
    finally:
        await js.delete_stream(stream)


async def test_redis_fixture_sets_and_gets_bytes(redis):
    key = f"test:{uuid.uuid4().hex}"
    await redis.set(key, b"value", ex=60)
    assert await redis.get(key) == b"value"


async def test_a_killed_nats_server_restarts_on_the_same_port_with_its_streams(tmp_path: Path):
    server = NatsServer(tmp_path / "nats")  # `make` installs the binary; without it this fails, loudly
    async with server:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="KEEP", subjects=["keep.>"])
        await js.publish("keep.1", b"x")
        await nc.close()
        port, old_pid = server.port, server.pid

        server.kill()
        assert server.pid is None and gone(old_pid)
        await server.start()

        assert server.port == port and server.pid != old_pid
        nc = await nats.connect(server.url)
        info = await nc.jetstream().stream_info("KEEP")
        await nc.close()
        assert info.state.messages == 1
    assert server.pid is None


async def test_L9_1_a_supervised_server_killed_while_the_loops_threads_are_all_busy_is_restarted(tmp_path: Path):
    """A supervised server's exit is noticed on a thread of its own. It waited on the loop's default executor
    (six threads on 2 cores): with a test session's long-lived servers holding most of them, a redis-server
    killed by the chaos test was never restarted and every read failed until the test gave up."""
    release = threading.Event()
    loop = asyncio.get_running_loop()
    busy = [loop.run_in_executor(None, release.wait) for _ in range(40)]  # more than any default executor holds
    try:
        async with RedisServer(tmp_path / "redis") as server:
            server.supervise()
            old = server.pid
            assert old is not None
            os.kill(old, signal.SIGKILL)
            await wait_for(lambda: server.pid not in (None, old), timeout=30, what="redis-server restarted")
            await wait_for(lambda: gone(old), what="the killed server reaped")
    finally:
        release.set()
        await asyncio.gather(*busy)


async def test_supervisor_restarts_a_killed_child():
    lines = Lines()
    sup = ProcessSupervisor(on_output=lines)
    sup.add("sleeper", SLEEPER, {})
    await sup.start()
    try:
        await wait_for(lambda: lines.of("sleeper") == ["ready"], what="first start")
        first = sup.pid("sleeper")

        await sup.kill("sleeper")

        second = await wait_for(lambda: sup.pid("sleeper") not in (None, first) and sup.pid("sleeper"))
        assert gone(first)
        assert sup.restarts("sleeper") == 1
        await wait_for(lambda: lines.of("sleeper") == ["ready", "ready"], what="second start")
        assert sup.pid("sleeper") == second
    finally:
        await sup.stop()


async def test_supervisor_restart_replaces_the_child_without_backoff():
    sup = ProcessSupervisor(on_output=Lines())
    sup.add("sleeper", SLEEPER, {})
    await sup.start()
    try:
        first = sup.pid("sleeper")
        await sup.restart("sleeper")
        await wait_for(lambda: sup.pid("sleeper") not in (None, first), timeout=2.0)
        assert sup.restarts("sleeper") == 1
    finally:
        await sup.stop()


async def test_supervisor_restarts_a_crashing_child_with_doubling_backoff(caplog):
    caplog.set_level("WARNING", logger="treadle.ops.processes")
    lines = Lines()
    sup = ProcessSupervisor(on_output=lines)
    sup.add("crasher", [sys.executable, "-c", "print('boom', flush=True); raise SystemExit(3)"], {})
    await sup.start()
    try:
        await wait_for(lambda: len(lines.of("crasher")) >= 3, what="three starts")
    finally:
        await sup.stop(timeout=2)
    assert sup.restarts("crasher") >= 2
    delays = [r.getMessage().rsplit(" ", 1)[-1] for r in caplog.records if "restarting in" in r.getMessage()]
    assert delays[:2] == ["0.25s", "0.50s"]


async def test_supervisor_stop_leaves_no_process_alive():
    stubborn = (
        "import signal, subprocess, sys\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import signal; signal.pause()'])\n"
        "print(g.pid, flush=True)\n"
        "signal.pause()\n"
    )
    lines = Lines()
    sup = ProcessSupervisor(on_output=lines)
    sup.add("plain", SLEEPER, {})
    sup.add("stubborn", [sys.executable, "-c", stubborn], {"TREADLE_TEST": "1"})
    await sup.start()
    await wait_for(lambda: lines.of("stubborn") and lines.of("plain"), what="children started")
    pids = [sup.pid("plain"), sup.pid("stubborn"), int(lines.of("stubborn")[0])]

    await sup.stop(timeout=0.5)

    await wait_for(lambda: all(gone(pid) for pid in pids), timeout=5, what=f"{pids} gone")
    assert sup.pid("plain") is None and sup.pid("stubborn") is None


async def test_children_die_when_the_supervisor_process_is_killed():
    script = (
        "import asyncio, sys\n"
        "from treadle.ops.processes import ProcessSupervisor\n"
        "async def main():\n"
        "    sup = ProcessSupervisor(on_output=lambda name, line: print(line, flush=True))\n"
        "    sup.add('child', [sys.executable, '-c', 'import os, signal; print(os.getpid(), flush=True); signal.pause()'])\n"
        "    await sup.start()\n"
        "    await asyncio.Event().wait()\n"
        "asyncio.run(main())\n"
    )
    outer = await asyncio.create_subprocess_exec(sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE)
    try:
        child = int(await asyncio.wait_for(outer.stdout.readline(), 10))
        assert not gone(child)
    finally:
        outer.kill()
        await outer.wait()
    await wait_for(lambda: gone(child), timeout=5, what=f"orphaned child {child} gone")


async def test_L9_3_a_graceful_stop_reaches_the_worker_alone_and_it_stops_its_own_children():
    """A provider host stops its runtimes itself (handing their runs over first); a SIGTERM to its whole group
    would reach the runtimes behind its back, and they would fail their runs (issue 17)."""
    worker = (
        "import signal, subprocess, sys\n"
        "runtime = subprocess.Popen([sys.executable, '-c', 'import signal, sys\\n"
        'signal.signal(signal.SIGTERM, lambda *a: (print("runtime got SIGTERM", flush=True), sys.exit(0)))\\n'
        'print("runtime ready", flush=True)\\n'
        "signal.pause()'])\n"
        "def stop(*_):\n"
        "    print('worker stopping its runtime', flush=True)\n"
        "    runtime.send_signal(signal.SIGINT)\n"
        "    runtime.wait()\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "signal.pause()\n"
    )
    lines = Lines()
    sup = ProcessSupervisor(on_output=lines)
    sup.add("worker", [sys.executable, "-c", worker], {})
    await sup.start()
    await wait_for(lambda: "runtime ready" in lines.of("worker"), what="runtime started")

    await sup.stop(timeout=10)

    assert "worker stopping its runtime" in lines.of("worker")
    assert "runtime got SIGTERM" not in lines.of("worker")
