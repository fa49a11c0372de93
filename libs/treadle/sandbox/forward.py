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
import selectors
import signal
import socket
import stat
import sys
import threading
import time

FAILED, CANNOT_EXECUTE, NOT_FOUND = 125, 126, 127
MAX_HEAD_BYTES = 8 * 1024
ANSWER_TIMEOUT = 30.0  # seconds the host may take to dial the target and answer a CONNECT
CONNECT_TIMEOUT = 2.0  # seconds the relay may wait for the host's socket (every connection waits meanwhile)
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
        # The one thread that serves every connection, started before the child exists: a child that uses up
        # its pids limit (a fork bomb) leaves the forwarder nothing to start, and it needs nothing.
        threading.Thread(target=Relay(listeners, unix_path).run, daemon=True).start()
    except (UsageError, OSError, RuntimeError) as failed:
        return fail(str(failed))
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


class Connection:
    """A client and its upstream on the host's socket: first the CONNECT answer is awaited (a ``--port``
    connection), then bytes are copied both ways; an end of stream is passed on as a half-close."""

    def __init__(self, client: socket.socket, upstream: socket.socket, target: str | None) -> None:
        self.client, self.upstream, self.target = client, upstream, target
        self.answer: bytearray | None = bytearray() if target is not None else None  # the host's, while awaited
        self.deadline = time.monotonic() + ANSWER_TIMEOUT
        # per direction (from client, from upstream): bytes not yet written on, and whether its source ended
        self.pending = {client: bytearray(), upstream: bytearray()}
        self.ended = {client: False, upstream: False}
        self.shut: set[socket.socket] = set()  # half-closed already

    def other(self, sock: socket.socket) -> socket.socket:
        return self.upstream if sock is self.client else self.client

    def sockets(self) -> tuple[socket.socket, socket.socket]:
        return self.client, self.upstream

    def done(self) -> bool:
        return all(self.ended[s] and not self.pending[s] for s in self.sockets())


class Relay:
    """Every listener and connection on one selector, in one thread: no thread or process is started per
    connection, so a sandbox at its pids limit still reaches its model API, and no error ends the loop."""

    def __init__(self, listeners: list[tuple[socket.socket, str | None]], unix_path: str) -> None:
        self.unix_path = unix_path
        self.selector = selectors.DefaultSelector()
        self.listeners = {listener: target for listener, target in listeners}
        self.paused: dict[socket.socket, float] = {}  # listener -> when to accept again (after EMFILE and such)
        self.connections: dict[socket.socket, Connection] = {}  # both sockets of each
        for listener in self.listeners:
            listener.setblocking(False)
            self.selector.register(listener, selectors.EVENT_READ)

    def run(self) -> None:
        while True:
            try:
                self.tick()
            except Exception as failed:  # a bug must not end every connection of the sandbox for good
                warn(f"relay: {failed!r}")
                time.sleep(0.05)

    def tick(self) -> None:
        now = time.monotonic()
        waits = [at - now for at in self.paused.values()]
        waits += [c.deadline - now for c in set(self.connections.values()) if c.answer is not None]
        ready = self.selector.select(max(0.0, min(waits)) if waits else None)
        for key, _ in ready:
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if sock in self.listeners:
                self.accept(sock)
            elif (conn := self.connections.get(sock)) is not None:
                try:
                    self.serve(conn, sock)
                except OSError as failed:
                    warn(f"connection to {conn.target or 'proxy'} failed: {failed}")
                    self.close(conn)
        now = time.monotonic()
        for listener, at in list(self.paused.items()):
            if at <= now:
                del self.paused[listener]
                self.selector.register(listener, selectors.EVENT_READ)
        for conn in {c for c in self.connections.values() if c.answer is not None and c.deadline <= now}:
            warn(f"egress did not answer for {conn.target}")
            self.close(conn)

    def accept(self, listener: socket.socket) -> None:
        try:
            client, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # out of file descriptors, an aborted handshake: accept again a little later
            self.selector.unregister(listener)
            self.paused[listener] = time.monotonic() + 0.05
            return
        if len(self.connections) >= 2 * MAX_CONNECTIONS:
            client.close()
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.settimeout(CONNECT_TIMEOUT)  # the host's socket answers at once unless its backlog is full
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream.connect(self.unix_path)  # a local socket: connected at once, or refused at once
            target = self.listeners[listener]
            if target is not None:
                upstream.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode("ascii"))
        except OSError as failed:
            warn(f"connection to {self.listeners[listener] or 'proxy'} failed: {failed}")
            client.close()
            upstream.close()
            return
        conn = Connection(client, upstream, target)
        for sock in conn.sockets():
            sock.setblocking(False)
            self.connections[sock] = conn
        self.watch(conn)

    def serve(self, conn: Connection, sock: socket.socket) -> None:
        """``sock`` is readable or writable: read into its buffer towards its peer, write what waits."""
        if conn.answer is not None:
            if sock is conn.upstream:
                self.read_answer(conn)
            return
        if not conn.ended[sock] and len(conn.pending[sock]) < CHUNK:
            try:
                data = sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError):  # only writable
                data = None
            if data == b"":
                conn.ended[sock] = True
            elif data:
                conn.pending[sock] += data
        for source in conn.sockets():
            self.flush(conn, source)
        if conn.done():
            self.close(conn)
        else:
            self.watch(conn)

    def flush(self, conn: Connection, source: socket.socket) -> None:
        """Write what came from ``source`` to its peer; once the source ended and all is written, half-close."""
        sink, pending = conn.other(source), conn.pending[source]
        if pending:
            try:
                sent = sink.send(pending)
            except (BlockingIOError, InterruptedError):
                sent = 0
            del pending[:sent]
        if conn.ended[source] and not pending and sink not in conn.shut:
            conn.shut.add(sink)
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def read_answer(self, conn: Connection) -> None:
        """The host's answer to CONNECT: on its 200 the bytes after it go to the client, else it is closed."""
        assert conn.answer is not None
        try:
            data = conn.upstream.recv(MAX_HEAD_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        if not data or len(conn.answer) + len(data) > MAX_HEAD_BYTES:
            warn(f"egress closed or garbled its answer for {conn.target}")
            self.close(conn)
            return
        conn.answer += data
        if b"\r\n\r\n" not in conn.answer:
            return
        head, _, early = bytes(conn.answer).partition(b"\r\n\r\n")
        status_line = head.split(b"\r\n", 1)[0]
        if status_line.split(b" ")[1:2] != [b"200"]:
            warn(f"egress refused {conn.target}: {status_line.decode('ascii', 'replace')}")
            self.close(conn)
            return
        conn.answer = None
        conn.pending[conn.upstream] += early
        self.flush(conn, conn.upstream)
        self.watch(conn)

    def watch(self, conn: Connection) -> None:
        """Each socket: readable while its buffer has room (and it has not ended), writable while its peer's
        bytes wait for it. While the CONNECT answer is awaited, only the upstream is read."""
        for sock in conn.sockets():
            if conn.answer is not None:
                events = selectors.EVENT_READ if sock is conn.upstream else 0
            else:
                events = selectors.EVENT_READ if not conn.ended[sock] and len(conn.pending[sock]) < CHUNK else 0
                if conn.pending[conn.other(sock)]:
                    events |= selectors.EVENT_WRITE
            registered = sock in self.selector.get_map()
            if events and registered:
                self.selector.modify(sock, events)
            elif events:
                self.selector.register(sock, events)
            elif registered:
                self.selector.unregister(sock)

    def close(self, conn: Connection) -> None:
        for sock in conn.sockets():
            self.connections.pop(sock, None)
            if sock in self.selector.get_map():
                self.selector.unregister(sock)
            sock.close()


def run_child(argv: list[str]) -> int:
    # os.posix_spawnp rather than subprocess: every runtime's start waits for this interpreter, and importing
    # subprocess was a fifth of it. As Popen did: PATH lookup, the signals Python ignores back to their
    # default (a runtime must die of SIGPIPE as it would anywhere), and no descriptor but stdin/stdout/stderr
    # reaches the child (close_fds).
    pending: list[int] = []
    child: list[int] = []

    def pass_on(signum: int, frame: object) -> None:
        if child:
            os.kill(child[0], signum)
        else:
            pending.append(signum)  # arrived before the child existed: delivered once it does

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, pass_on)
    try:
        closes = [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_fds()]
        child.append(
            os.posix_spawnp(argv[0], argv, os.environ, file_actions=closes, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        )
    except FileNotFoundError:
        fail(f"{argv[0]}: not found")
        return NOT_FOUND
    except OSError as failed:
        fail(f"{argv[0]}: {failed.strerror or failed}")
        return CANNOT_EXECUTE
    for early in pending:
        os.kill(child[0], early)
    _, status = os.waitpid(child[0], 0)
    child.clear()  # reaped: its pid may be another process's from here on
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _inheritable_fds() -> list[int]:
    """Descriptors above stderr that an exec would pass on (whatever this process was itself given)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    found.append(fd)
            except OSError:
                pass  # the listing's own descriptor, closed by now
    return found


def warn(message: str) -> None:
    print(f"forward: {message}", file=sys.stderr, flush=True)


def fail(message: str) -> int:
    warn(message)
    return FAILED


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)  # daemon threads may sit in accept() or recv(): do not wait for them
