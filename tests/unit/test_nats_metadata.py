"""The metadata parser the workers install gives what nats-py's own gives, for real ack subjects and arbitrary
ones (the same object, or the same kind of refusal)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treadle.eventlog import nats_patches


def _outcome(parse, reply: str):
    try:
        return repr(parse(reply))
    except Exception as exc:
        return type(exc)


tokens = st.one_of(
    st.integers(min_value=0, max_value=2**63).map(str),
    st.sampled_from(["_", "", "x", "TREADLE_EVENTS", "-1", "1.5", "supervisor-dispatch-p3"]),
)


@given(st.lists(tokens, min_size=5, max_size=14), st.sampled_from(["$JS.ACK", "$JS.NAK", "_INBOX"]))
@settings(max_examples=3000)
def test_ack_subjects_parse_as_nats_py_parses_them(rest: list[str], prefix: str) -> None:
    reply = ".".join([prefix, *rest])
    assert _outcome(nats_patches.metadata_from_reply, reply) == _outcome(nats_patches.original_metadata, reply)


@given(st.lists(tokens, min_size=5, max_size=14), st.sampled_from(["$JS.ACK", "$JS.NAK", "_INBOX"]))
@settings(max_examples=3000)
def test_the_stream_sequence_alone_is_the_one_nats_py_parses(rest: list[str], prefix: str) -> None:
    reply = ".".join([prefix, *rest])
    try:
        theirs = nats_patches.original_metadata(reply).sequence.stream
    except Exception:
        return  # not a delivery nats-py reads (the SSE frames' ack subjects all are)
    assert nats_patches.stream_sequence(reply) == theirs


@pytest.mark.parametrize(
    "reply",
    [
        "$JS.ACK.TREADLE_EVENTS.supervisor-dispatch-p3.2.123456.7890.1733300000000000000.12",
        "$JS.ACK.hub.ACC.TREADLE_EVENTS.projector.1.5.6.1733300000000000000.0.r4nd",
        "$JS.ACK._.ACC.S.c.1.5.6.1733300000000000000.0",
    ],
)
def test_a_deliverys_metadata_equals_nats_pys(reply: str) -> None:
    ours, theirs = nats_patches.metadata_from_reply(reply), nats_patches.original_metadata(reply)
    assert ours == theirs and repr(ours) == repr(theirs) and hash(ours) == hash(theirs)
    assert ours.sequence.stream == theirs.sequence.stream == nats_patches.stream_sequence(reply)
