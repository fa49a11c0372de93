"""Sandbox side of the egress path: loopback listeners that reach the host's Egress over a Unix socket.

    python3 -I -S forward.py --unix SOCK [--port LISTEN=HOST:PORT ...] [--proxy LISTEN] -- ARGV...

``--port 8123=127.0.0.1:8123`` listens on 127.0.0.1:8123 and sends every connection through SOCK with
``CONNECT 127.0.0.1:8123``, so a runtime keeps its model API base URL. ``--proxy 3128`` listens on
127.0.0.1:3128 as an HTTP CONNECT proxy whose requests go through SOCK unchanged: the host decides.
Then ARGV runs as the child with stdin/stdout/stderr inherited; SIGTERM/SIGINT/SIGHUP are passed on to
it, and the forwarder exits with its status (128+N when signal N killed it).

Stdlib only and run without any venv: it starts inside the sandbox by the interpreter's path. It never
writes to stdout (the runtimes speak JSON-RPC there); its own failures are one line on stderr and exit
status 125 (126/127 when ARGV cannot be executed / is not found).
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

FAILED, CANNOT_EXECUTE, NOT_FOUND = 125, 126, 127
MAX_HEAD_BYTES = 8 * 1024
ANSWER_TIMEOUT = 30.0  # seconds the host may take to dial the target and answer a CONNECT
CHUNK = 64 * 1024
MAX_CONNECTIONS = 256  # per forwarder; the host bounds what it accepts as well


class UsageError(Exception):
    pass


def main(args: list[str]) -> int:
    try:
        unix_path, ports, proxy_ports, argv = parse_args(args)
        if not stat.S_ISSOCK(os.stat(unix_path).st_mode):
            raise UsageError(f"{unix_path} is not a socket")
        listeners: list[tuple[socket.socket, str | None]] = [(bind(listen), target) for listen, target in ports]
        listeners += [(bind(listen), None) for listen in proxy_ports]
    except (UsageError, OSError) as failed:
        return fail(str(failed))
    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
    for listener, target in listeners:
        threading.Thread(target=accept_loop, args=(listener, unix_path, target, slots), daemon=True).start()
    return run_child(argv)


def parse_args(args: list[str]) -> tuple[str, list[tuple[int, str]], list[int], list[str]]:
    if "--" not in args:
        raise UsageError("usage: forward.py --unix SOCK [--port LISTEN=HOST:PORT ...] [--proxy LISTEN] -- ARGV...")
    split = args.index("--")
    options, argv = args[:split], args[split + 1 :]
    if not argv:
        raise UsageError("no command after --")
    unix_path, ports, proxy_ports = None, [], []
    pairs = iter(options)
    for option in pairs:
        value = next(pairs, None)
        if value is None:
            raise UsageError(f"{option} needs a value")
        if option == "--unix":
            unix_path = value
        elif option == "--port":
            listen, _, target = value.partition("=")
            host, _, port = target.rpartition(":")
            if not host or not port.isdigit() or any(c.isspace() or not c.isprintable() for c in host):
                raise UsageError(f"--port {value!r}: expected LISTEN_PORT=HOST:PORT")
            ports.append((port_number(listen), f"{host}:{port_number(port)}"))
        elif option == "--proxy":
            proxy_ports.append(port_number(value))
        else:
            raise UsageError(f"unknown option {option!r}")
    if unix_path is None:
        raise UsageError("--unix SOCK is required")
    return unix_path, ports, proxy_ports, argv


def port_number(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise UsageError(f"{text!r} is not a port number")
    return int(text)


def bind(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
    except OSError as failed:
        listener.close()
        raise OSError(f"cannot listen on 127.0.0.1:{port}: {failed.strerror or failed}") from None
    return listener


def accept_loop(listener: socket.socket, unix_path: str, target: str | None, slots: threading.BoundedSemaphore) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            time.sleep(0.05)  # out of file descriptors or an aborted handshake: retry, without spinning
            continue
        if not slots.acquire(blocking=False):
            client.close()
            continue
        threading.Thread(target=serve, args=(client, unix_path, target, slots), daemon=True).start()


def serve(client: socket.socket, unix_path: str, target: str | None, slots: threading.BoundedSemaphore) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream.connect(unix_path)
        if target is not None and not open_tunnel(upstream, client, target):
            return
        # A proxy client's CONNECT goes through unchanged, and the host's answer comes back the same way.
        pipe(client, upstream)
    except OSError as failed:
        warn(f"connection to {target or 'proxy'} failed: {failed}")
    finally:
        client.close()
        upstream.close()
        slots.release()


def open_tunnel(upstream: socket.socket, client: socket.socket, target: str) -> bool:
    """Ask the host for ``target``; on its 200 pass on any bytes that came after the answer."""
    upstream.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode("ascii"))
    upstream.settimeout(ANSWER_TIMEOUT)
    answer = b""
    while b"\r\n\r\n" not in answer:
        data = upstream.recv(MAX_HEAD_BYTES)
        if not data or len(answer) + len(data) > MAX_HEAD_BYTES:
            warn(f"egress closed or garbled its answer for {target}")
            return False
        answer += data
    upstream.settimeout(None)
    head, _, early = answer.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0]
    if status_line.split(b" ")[1:2] != [b"200"]:
        warn(f"egress refused {target}: {status_line.decode('ascii', 'replace')}")
        return False
    if early:
        client.sendall(early)
    return True


def pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both directions ended; end-of-stream is passed on as a half-close."""
    other = threading.Thread(target=pump, args=(b, a), daemon=True)
    other.start()
    pump(a, b)
    other.join()


def pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        for s in (source, sink):  # wakes the other direction's thread up
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def run_child(argv: list[str]) -> int:
    pending: list[int] = []
    child: list[subprocess.Popen] = []

    def pass_on(signum: int, frame: object) -> None:
        if child:
            child[0].send_signal(signum)
        else:
            pending.append(signum)  # arrived before the child existed: delivered once it does

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, pass_on)
    try:
        child.append(subprocess.Popen(argv))
    except FileNotFoundError:
        fail(f"{argv[0]}: not found")
        return NOT_FOUND
    except OSError as failed:
        fail(f"{argv[0]}: {failed.strerror or failed}")
        return CANNOT_EXECUTE
    for early in pending:
        child[0].send_signal(early)
    status = child[0].wait()
    return 128 - status if status < 0 else status


def warn(message: str) -> None:
    print(f"forward: {message}", file=sys.stderr, flush=True)


def fail(message: str) -> int:
    warn(message)
    return FAILED


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)  # daemon threads may sit in accept() or recv(): do not wait for them
