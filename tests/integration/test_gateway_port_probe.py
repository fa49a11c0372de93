"""Issue 25: restarting the stack at once. ``treadle up`` probes the gateway's port before starting anything; the
probe must say what the server's own bind will do: a port held only by a stopped server's connections in
TIME_WAIT is free (uvicorn binds with SO_REUSEADDR), a port with a live listener is not. Real sockets on
127.0.0.1."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.support.helpers import wait_for
from treadle.cli.up import gateway_port_free

_TIME_WAIT = "06"  # the state column of /proc/net/tcp


def _in_time_wait(port: int) -> bool:
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        if int(local.split(":")[1], 16) == port and state == _TIME_WAIT:
            return True
    return False


def _plain_bind_refused(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


async def test_a_port_held_only_by_time_wait_connections_of_a_stopped_server_is_free_and_a_listener_is_not():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first, as a stopping gateway does: its end goes to TIME_WAIT
    client.recv(1)  # the server's FIN
    client.close()
    server.close()  # the server is gone
    await wait_for(lambda: _in_time_wait(port), timeout=10, what=f"a connection on port {port} in TIME_WAIT")
    assert _plain_bind_refused(port)  # what the probe answered before: "in use"
    assert gateway_port_free("127.0.0.1", port)

    live = socket.socket()
    live.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    live.bind(("127.0.0.1", port))
    live.listen()
    try:
        assert not gateway_port_free("127.0.0.1", port)  # a running server still makes `treadle up` refuse
    finally:
        live.close()
