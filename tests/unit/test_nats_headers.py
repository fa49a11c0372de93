"""The header parser the workers install gives exactly what nats-py's own gives, for real header blocks and
for arbitrary bytes (an upgrade of nats-py that parses differently fails here, not in production)."""

from __future__ import annotations

import random

from nats.aio.client import Client

from treadle.eventlog import nats_patches

REAL = (
    b"Nats-Stream: TREADLE_EVENTS\r\nNats-Subject: treadle.evt.acme.thr_1.run.completed.7\r\n"
    b"Nats-Sequence: 123456\r\nNats-Time-Stamp: 2026-12-04T19:00:00.123456789Z\r\n"
    b"Nats-Expected-Last-Subject-Sequence: 123450\r\nNats-Msg-Id: evt_01m915h8jr27zja35a2w0znpn2\r\n"
    b"traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n"
)
EDGES = [
    b"",
    b"\r\n",
    b"a b: x\r\n",
    b"\x1cab: y\r\n",
    b"ab\x1f: y\r\n",
    b"ok:\tv \r\n",
    b"ok:v\r\nok: again\r\n",
    b": empty name\r\n",
    b"no colon\r\n",
    b"\xffname: v\r\n",
    b"name: \xff\xfe\r\n",
    b" padded : value : with colon \r\n",
    b"k:\x0bv\x0c\r\n",
]


def test_real_and_edge_header_blocks_parse_as_nats_py_parses_them():
    for raw in [REAL, *EDGES]:
        assert nats_patches.parse_header_lines(raw) == nats_patches.original_header_lines(raw), raw


def test_arbitrary_bytes_parse_as_nats_py_parses_them():
    alphabet = b"ab:-_ \t\r\n\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\xc2\xff0"
    rng = random.Random(24)
    for _ in range(20_000):
        raw = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        assert nats_patches.parse_header_lines(raw) == nats_patches.original_header_lines(raw), raw


def test_install_makes_clients_use_it():
    assert nats_patches.install()
    try:
        assert Client._parse_header_lines(REAL) == nats_patches.original_header_lines(REAL)
        assert Client._parse_header_lines is nats_patches.parse_header_lines
    finally:
        nats_patches.uninstall()
    assert Client._parse_header_lines is not nats_patches.parse_header_lines
