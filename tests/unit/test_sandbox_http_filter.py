"""Issue 36, finding 6b: the egress's filter of what a sandbox sends to the orchestrator's MCP server (pure): whole
checked heads and the bodies they frame go on, in whatever pieces they arrive; anything else is refused."""

from __future__ import annotations

import pytest

from treadle.sandbox.http_filter import MAX_HEAD_BYTES, McpRequests, Refused

MCP = b"POST /mcp?x=1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n\r\nhello"
GET = b"GET /mcp HTTP/1.1\r\nHost: gw\r\n\r\n"


def test_mcp_requests_pass_whole_in_any_pieces_and_in_order():
    stream = MCP + GET + MCP
    for size in (1, 3, 7, len(stream)):
        requests = McpRequests("/mcp")
        passed = b"".join(requests(stream[i : i + size]) for i in range(0, len(stream), size))
        assert passed == stream
    requests = McpRequests("/mcp")
    assert requests(MCP[:20]) == b""  # nothing of a head goes on before the whole head is checked


@pytest.mark.parametrize(
    "raw, status",
    [
        (b"GET /metrics HTTP/1.1\r\n\r\n", 403),
        (b"GET /mcpx HTTP/1.1\r\n\r\n", 403),
        (b"GET /mcp/ HTTP/1.1\r\n\r\n", 403),
        (b"GET http://gw/mcp HTTP/1.1\r\n\r\n", 403),
        (b"PUT /mcp HTTP/1.1\r\n\r\n", 405),
        (b"GET /mcp HTTP/2.0\r\n\r\n", 400),
        (b"GET  /mcp HTTP/1.1\r\n\r\n", 400),
        (b"GET /mcp HTTP/1.1\r\nHost: gw\nX: y\r\n\r\n", 400),
        (b"GET /mcp HTTP/1.1\r\n folded: header\r\n\r\n", 400),
        (b"GET /mcp HTTP/1.1\r\nContent-Length : 3\r\n\r\n", 400),
        (b"POST /mcp HTTP/1.1\r\nContent-Length: +3\r\n\r\n", 400),
        (b"POST /mcp HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400),
        (b"POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"GET /mcp HTTP/1.1\r\nUpgrade: h2c\r\n\r\n", 400),
        (b"GET /mcp HTTP/1.1\r\nX: a\x00b\r\n\r\n", 400),
        (b"GET /mcp HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES, 431),
    ],
)
def test_anything_but_a_plain_mcp_request_is_refused(raw, status):
    with pytest.raises(Refused) as refused:
        McpRequests("/mcp")(raw)
    assert refused.value.status == status


def test_a_body_is_never_read_as_a_request_and_a_request_behind_one_is_checked():
    body = b"GET /metrics HTTP/1.1\r\n\r\n"
    request = b"POST /mcp HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    assert McpRequests("/mcp")(request) == request  # the body's bytes are the body's
    with pytest.raises(Refused):
        McpRequests("/mcp")(request + body)
