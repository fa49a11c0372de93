"""Real endpoints for the egress tests: a model API on 127.0.0.1 and listeners that must never be reached."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MODELS = json.dumps({"object": "list", "data": [{"id": "gpt-test", "object": "model"}]}).encode()
BIG = bytes(range(256)) * 4096  # 1 MiB


class _ModelApiHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = {"/v1/models": MODELS, "/big": BIG}.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json" if body is MODELS else "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def model_api() -> Iterator[int]:
    """A tiny HTTP 'model API' on 127.0.0.1; yields its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ModelApiHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class Listener:
    """A listening port that never accepts: a connection made to it waits in its backlog, where
    ``waiting()`` finds it. Whoever connected did so before its connect() returned, so once a client has
    the proxy's answer, an empty backlog proves nothing was dialled."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.seen = 0

    def waiting(self) -> int:
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return self.seen
            conn.close()
            self.seen += 1

    def close(self) -> None:
        self.sock.close()


@contextmanager
def socket_dir(owner: int | None = None) -> Iterator[Path]:
    """A short private directory for an Egress socket (sun_path is 108 bytes; pytest's tmp_path is long),
    owned by the sandbox's uid when it runs as one."""
    path = Path(tempfile.mkdtemp(prefix="egress-", dir="/tmp"))
    if owner is not None:
        os.chown(path, owner, owner)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
