"""The whole egress path with a real bubblewrap sandbox (own empty network namespace, loopback only):
the runtime inside reaches the model API through forward.py and the host's Egress, and nothing else.
The forwarder also runs the runtime: stdio, exit status and signals must pass through it unchanged."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil
import pytest

from tests.integration.egress_servers import BIG, MODELS, Listener, model_api, socket_dir
from treadle.sandbox.egress import FORWARD_SCRIPT, Egress, forward_command, sandbox_python

TENANT_UID = 200_001
ROOT_PYTHON = os.path.realpath(sys.executable)  # visible to root through --ro-bind / /
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # no proxy settings leak in from the test's environment

CLIENT = r"""
import http.client, json, socket, sys
api, broker, refused_forward, proxy = map(int, sys.argv[1:5])
out = {}
def get(conn):
    conn.request("GET", "/v1/models")
    response = conn.getresponse()
    return [response.status, response.read().decode()]
out["api"] = get(http.client.HTTPConnection("127.0.0.1", api, timeout=10))
try:
    socket.create_connection(("127.0.0.1", broker), timeout=5)
    out["broker_direct"] = "connected"
except OSError as e:
    out["broker_direct"] = type(e).__name__
tunnel = http.client.HTTPConnection("127.0.0.1", proxy, timeout=10)
tunnel.set_tunnel("127.0.0.1", broker)
try:
    tunnel.request("GET", "/")
    out["broker_proxy"] = "connected"
except OSError as e:
    out["broker_proxy"] = str(e)
with socket.create_connection(("127.0.0.1", refused_forward), timeout=10) as s:
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    try:
        out["broker_forward"] = s.recv(100).decode()
    except OSError as e:
        out["broker_forward"] = type(e).__name__
tunnel = http.client.HTTPConnection("127.0.0.1", proxy, timeout=10)
tunnel.set_tunnel("127.0.0.1", api)
out["api_proxy"] = get(tunnel)
print(json.dumps(out), flush=True)
"""


def bwrap(socket_dir: Path, argv: list[str], *, as_uid: int | None = None) -> list[str]:
    sandbox = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--bind",
        str(socket_dir),
        str(socket_dir),
        *argv,
    ]
    if as_uid is None:
        return sandbox
    return ["setpriv", "--reuid", str(as_uid), "--regid", str(as_uid), "--clear-groups", *sandbox]


@pytest.fixture
def api_port() -> Iterator[int]:
    with model_api() as port:
        yield port


@pytest.fixture
def broker() -> Iterator[Listener]:
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture
async def tenant_egress(api_port: int) -> AsyncIterator[Egress]:
    with socket_dir(owner=TENANT_UID) as directory:
        async with Egress(directory / "egress.sock", frozenset({("127.0.0.1", api_port)})) as egress:
            yield egress


@pytest.fixture
async def root_egress(api_port: int) -> AsyncIterator[Egress]:
    with socket_dir() as directory:
        async with Egress(directory / "egress.sock", frozenset({("127.0.0.1", api_port)})) as egress:
            yield egress


async def run(argv: list[str], stdin: bytes = b"") -> tuple[int, bytes, bytes]:
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), 60)
    return process.returncode, out, err


async def test_a_tenant_sandbox_reaches_the_model_api_and_nothing_else(tenant_egress, api_port, broker):
    python = sandbox_python()  # the venv's interpreter lives under /root, which the tenant uid cannot enter
    refused_forward, proxy = 7001, 3128
    command = forward_command(
        tenant_egress.socket_path,
        [python, "-c", CLIENT, str(api_port), str(broker.port), str(refused_forward), str(proxy)],
        ports=[(api_port, "127.0.0.1", api_port), (refused_forward, "127.0.0.1", broker.port)],
        proxy_port=proxy,
        python=python,
    )
    code, out, err = await run(bwrap(tenant_egress.socket_path.parent, command, as_uid=TENANT_UID))
    assert code == 0, err.decode()
    seen = json.loads(out)
    assert seen["api"] == [200, MODELS.decode()]  # unchanged base URL, first request right at start
    assert seen["api_proxy"] == [200, MODELS.decode()]  # the HTTPS_PROXY way
    assert seen["broker_direct"] == "ConnectionRefusedError"  # the host's loopback is not the sandbox's
    assert "403 Forbidden" in seen["broker_proxy"]
    assert seen["broker_forward"] in ("", "ConnectionResetError")  # closed without an answer
    assert broker.waiting() == 0
    assert tenant_egress.counts.tunnelled == 2 and tenant_egress.counts.refused == 2
    assert f"egress refused 127.0.0.1:{broker.port}" in err.decode()  # the forwarder says why, on stderr


async def test_the_childs_stdin_and_stdout_pass_through_byte_exact(root_egress, api_port):
    lines = [
        {"jsonrpc": "2.0", "id": i, "method": "turn/start", "params": {"text": "héllo ✓ " * i}} for i in range(200)
    ]
    lines.append({"jsonrpc": "2.0", "id": "big", "result": "x" * 300_000})
    payload = b"".join(json.dumps(line, ensure_ascii=False).encode() + b"\n" for line in lines) + b"no newline at end"
    echo = "import sys, shutil; shutil.copyfileobj(sys.stdin.buffer, sys.stdout.buffer)"
    command = forward_command(
        root_egress.socket_path,
        [ROOT_PYTHON, "-c", echo],
        ports=[(api_port, "127.0.0.1", api_port)],
        python=ROOT_PYTHON,
    )
    code, out, err = await run(bwrap(root_egress.socket_path.parent, command), stdin=payload)
    assert code == 0 and err == b""
    assert out == payload


PARALLEL_CLIENT = r"""
import hashlib, http.client, sys
from concurrent.futures import ThreadPoolExecutor
def fetch(_):
    conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
    conn.request("GET", "/big")
    return hashlib.sha256(conn.getresponse().read()).hexdigest()
with ThreadPoolExecutor(16) as pool:
    print(*pool.map(fetch, range(16)))
"""


async def test_sixteen_parallel_1mib_responses_arrive_whole(root_egress, api_port):
    command = forward_command(
        root_egress.socket_path,
        [ROOT_PYTHON, "-c", PARALLEL_CLIENT, str(api_port)],
        ports=[(api_port, "127.0.0.1", api_port)],
        python=ROOT_PYTHON,
    )
    code, out, err = await run(bwrap(root_egress.socket_path.parent, command))
    assert code == 0, err.decode()
    assert out.decode().split() == [hashlib.sha256(BIG).hexdigest()] * 16
    assert root_egress.counts.tunnelled == 16


@pytest.mark.parametrize(("child", "status"), [("raise SystemExit(7)", 7), ("import os; os.kill(os.getpid(), 9)", 137)])
async def test_the_childs_exit_status_is_the_forwarders(root_egress, child, status):
    command = forward_command(root_egress.socket_path, [ROOT_PYTHON, "-c", child], proxy_port=3128, python=ROOT_PYTHON)
    code, out, _ = await run(bwrap(root_egress.socket_path.parent, command))
    assert (code, out) == (status, b"")


CHILD_WAITING_FOR_SIGTERM = """
import signal, sys
if sys.argv[1] == "handles":
    signal.signal(signal.SIGTERM, lambda *_: (print("terminated", flush=True), sys.exit(3)))
print("ready", flush=True)
signal.pause()
"""


@pytest.mark.parametrize(("disposition", "status", "said"), [("handles", 3, b"terminated\n"), ("default", 143, b"")])
async def test_sigterm_to_the_forwarder_reaches_the_child(root_egress, disposition, status, said):
    command = forward_command(
        root_egress.socket_path,
        [ROOT_PYTHON, "-c", CHILD_WAITING_FOR_SIGTERM, disposition],
        proxy_port=3128,
        python=ROOT_PYTHON,
    )
    process = await asyncio.create_subprocess_exec(
        *bwrap(root_egress.socket_path.parent, command), stdout=subprocess.PIPE, env=ENV
    )
    assert await asyncio.wait_for(process.stdout.readline(), 30) == b"ready\n"
    # bwrap itself passes no signals on; the launcher signals the forwarder (the sandbox's pid 2) by pid.
    forwarders = [
        p for p in psutil.Process(process.pid).children(recursive=True) if p.cmdline()[:4] == command[:4]
    ]  # python -I -S forward.py (bwrap's own init has bwrap's argv)
    assert len(forwarders) == 1
    forwarders[0].send_signal(signal.SIGTERM)
    rest = await asyncio.wait_for(process.stdout.read(), 30)
    assert (await process.wait(), rest) == (status, said)


def forward_directly(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ROOT_PYTHON, "-I", "-S", str(FORWARD_SCRIPT), *args], capture_output=True, timeout=30, env=ENV
    )


def test_a_port_that_cannot_be_bound_fails_before_the_child_runs(root_egress_path):
    taken = Listener()
    try:
        done = forward_directly(
            "--unix",
            str(root_egress_path),
            "--port",
            f"{taken.port}=127.0.0.1:{taken.port}",
            "--",
            ROOT_PYTHON,
            "-c",
            "print('child ran')",
        )
    finally:
        taken.close()
    assert done.returncode == 125 and done.stdout == b""
    assert done.stderr.decode() == f"forward: cannot listen on 127.0.0.1:{taken.port}: Address already in use\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--unix", "/nonexistent/egress.sock", "--", "true"], "No such file or directory"),
        (["--unix", "{sock}", "--port", "80=nowhere", "--", "true"], "expected LISTEN_PORT=HOST:PORT"),
        (["--unix", "{sock}", "--port", "80=a\r\nX: y:80", "--", "true"], "expected LISTEN_PORT=HOST:PORT"),
        (["--unix", "{sock}", "--proxy", "0", "--", "true"], "is not a port number"),
        (["--unix", "{sock}", "true"], "usage:"),
        (["--unix", "{sock}", "--", "/nonexistent/runtime"], "/nonexistent/runtime: not found"),
    ],
)
def test_forwarder_failures_are_one_line_on_stderr(root_egress_path, args, message):
    done = forward_directly(*(a.replace("{sock}", str(root_egress_path)) for a in args))
    expected = 127 if "runtime" in message else 125
    assert done.returncode == expected and done.stdout == b""
    assert message in done.stderr.decode() and done.stderr.decode().count("\n") == 1


@pytest.fixture
def root_egress_path() -> Iterator[Path]:
    """A socket file where an Egress would listen (bound, not served: these runs never connect)."""
    import socket

    with socket_dir() as directory:
        path = directory / "egress.sock"
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
            yield path


# The child's start as Popen gave it (forward.py spawns it itself): no descriptor beyond stdio, and the signals
# Python ignores (SIGPIPE, SIGXFSZ) back to their default, so a runtime's pipelines die of SIGPIPE as anywhere.
SHOW_CHILD = "grep SigIgn /proc/$$/status; ls /proc/$$/fd | sort -n | tr '\\n' ' '"


def test_the_child_gets_stdio_only_and_default_signals(root_egress_path):
    read_end, write_end = os.pipe()  # inheritable descriptors the forwarder itself was given
    os.set_inheritable(read_end, True)
    os.set_inheritable(write_end, True)
    try:
        done = subprocess.run(
            [ROOT_PYTHON, "-I", "-S", str(FORWARD_SCRIPT), "--unix", str(root_egress_path), "--proxy", "3128"]
            + ["--", "/bin/sh", "-c", SHOW_CHILD],
            capture_output=True,
            timeout=30,
            env=ENV,
            close_fds=False,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert done.returncode == 0, done.stderr
    ignored, fds = done.stdout.decode().splitlines()
    assert int(ignored.split()[1], 16) & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)) == 0
    assert fds.split() == ["0", "1", "2"]


def test_a_runtime_that_cannot_be_executed_is_status_126(root_egress_path, tmp_path):
    not_executable = tmp_path / "runtime"
    not_executable.write_text("#!/bin/sh\n")
    done = forward_directly("--unix", str(root_egress_path), "--", str(not_executable))
    assert done.returncode == 126 and done.stdout == b""
    assert done.stderr.decode() == f"forward: {not_executable}: Permission denied\n"
