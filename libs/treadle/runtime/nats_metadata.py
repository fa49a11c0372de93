"""A faster ``msg.metadata`` (a JetStream delivery's ack subject, parsed) for every message nats-py receives.

nats-py 2.16 (pinned in pyproject.toml) builds its two frozen dataclasses through their ``__init__``, an
``object.__setattr__`` per field: 8.8 us per delivery on a loaded machine, and the handlers read the stream
sequence of nearly every message. Filling in the same fields directly gives an equal object in 3.4 us
(``tests/unit/test_nats_metadata.py`` compares the two for arbitrary subjects).
"""

from __future__ import annotations

import datetime

from nats.aio.msg import Msg

_ORIGINAL = Msg.Metadata.__dict__["_from_reply"]  # a classmethod
_UTC = datetime.UTC
_V1_TOKENS = 9  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>; longer ones carry a domain
_new = object.__new__


def metadata_from_reply(reply: str) -> Msg.Metadata:
    tokens = Msg.Metadata._get_metadata_fields(reply)  # refuses what is not an ack subject, as nats-py does
    if len(tokens) == _V1_TOKENS:
        stamp, sseq, cseq, delivered, pending, stream, consumer, domain = 7, 5, 6, 4, 8, 2, 3, None
    else:
        stamp, sseq, cseq, delivered, pending, stream, consumer = 9, 7, 8, 6, 10, 4, 5
        domain = "" if tokens[2] == "_" else tokens[2]
    # nats-py's order of conversions, so a malformed token fails alike
    timestamp = datetime.datetime.fromtimestamp(int(tokens[stamp]) / 1_000_000_000.0, _UTC)
    pair = _new(Msg.Metadata.SequencePair)
    pair.__dict__["stream"] = int(tokens[sseq])
    pair.__dict__["consumer"] = int(tokens[cseq])
    meta = _new(Msg.Metadata)
    meta.__dict__.update(
        sequence=pair,
        num_delivered=int(tokens[delivered]),
        num_pending=int(tokens[pending]),
        timestamp=timestamp,
        stream=tokens[stream],
        consumer=tokens[consumer],
        domain=domain,
    )
    return meta


def stream_sequence(reply: str) -> int:
    """A delivery's stream sequence alone, from the tokens :func:`metadata_from_reply` takes it from (an SSE frame
    needs nothing else of the metadata)."""
    tokens = Msg.Metadata._get_metadata_fields(reply)
    return int(tokens[5 if len(tokens) == _V1_TOKENS else 7])


def install() -> None:
    """Make every message of this process parse its metadata with :func:`metadata_from_reply`."""
    Msg.Metadata._from_reply = classmethod(lambda _cls, reply: metadata_from_reply(reply))  # type: ignore[method-assign,assignment]


def original(reply: str) -> Msg.Metadata:
    """nats-py's own parser (for the test that the two agree)."""
    parsed: Msg.Metadata = _ORIGINAL.__func__(Msg.Metadata, reply)
    return parsed
