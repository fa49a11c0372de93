"""What a sandbox may send to the orchestrator's MCP server through its egress: HTTP/1.1 requests for the MCP
path and nothing else. The egress grants a host:port; on the gateway's port that was every route (``/metrics``
counting every tenant's requests, ``/healthz``, ``/schema``, the console), none of them a runtime's business.

Every request head on the connection is read whole and checked strictly before a byte of it is passed on:
lines end in CRLF and hold no other CR or LF, one ``Content-Length`` frames the body, and no
``Transfer-Encoding`` or ``Upgrade`` changes the framing. So the gateway's parser frames exactly the requests
checked here: a head it might read as two requests, or a body it might read as a request, is refused.
"""

from __future__ import annotations

import re

METHODS = frozenset({"POST", "GET", "DELETE"})  # what MCP's Streamable HTTP transport sends
MAX_HEAD_BYTES = 8 * 1024
_NAME = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")  # no control character but tab
_LENGTH = re.compile(rb"[0-9]{1,15}")


class Refused(Exception):
    """A request that is not passed on; ``status`` is the egress's answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def body_length(head: bytes, path: str) -> int:
    """The length of the body behind ``head`` (request line, headers, blank line) when it asks for ``path``,
    else :class:`Refused`."""
    lines = head[:-4].split(b"\r\n")
    if any(b"\r" in line or b"\n" in line for line in lines):
        raise Refused(400, "a line ends without CRLF")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise Refused(400, "malformed request line")
    method, target = parts[0].decode("latin-1"), parts[1].decode("latin-1")
    if method not in METHODS:
        raise Refused(405, f"{method[:16]!r} is not an MCP request")
    if target.split("?", 1)[0] != path:
        raise Refused(403, f"only {path} is reachable here, not {target[:64]!r}")
    length: int | None = None
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _NAME.fullmatch(name) or not _VALUE.fullmatch(value):
            raise Refused(400, "malformed header line")
        name = name.lower()
        if name in (b"transfer-encoding", b"upgrade"):
            raise Refused(400, f"{name.decode()} is not passed (a body is framed by Content-Length)")
        if name == b"content-length":
            value = value.strip(b" \t")
            if length is not None or not _LENGTH.fullmatch(value):
                raise Refused(400, "one Content-Length of digits, at most")
            length = int(value)
    return length or 0


class McpRequests:
    """Fed what a client sends on one connection, returns what may go on to the server: whole checked heads
    and the bodies they frame, in order. Raises :class:`Refused` at the first request that may not."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._buffer = bytearray()
        self._body_left = 0

    def __call__(self, data: bytes) -> bytes:
        passed = bytearray()
        self._buffer += data
        while self._buffer:
            if self._body_left:
                n = min(self._body_left, len(self._buffer))
                passed += self._buffer[:n]
                del self._buffer[:n]
                self._body_left -= n
                continue
            end = self._buffer.find(b"\r\n\r\n")
            if end + 4 > MAX_HEAD_BYTES or (end < 0 and len(self._buffer) >= MAX_HEAD_BYTES):
                raise Refused(431, f"request head over {MAX_HEAD_BYTES} bytes")
            if end < 0:
                break  # the rest of the head is still on its way
            head = bytes(self._buffer[: end + 4])
            self._body_left = body_length(head, self.path)
            passed += head
            del self._buffer[: end + 4]
        return bytes(passed)
