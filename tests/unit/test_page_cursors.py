"""Page cursors (gateway/cursors.py): what one encodes comes back only for the tenant, list, thread and filter
it was made for, under the key it was made with; anything else, edited by a single character or not a cursor
at all, is InvalidCursor and nothing else."""

from __future__ import annotations

import base64

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from treadle.gateway import cursors
from treadle.gateway.cursors import InvalidCursor

KEY = b"k" * 32
THREAD = "thr_01JB0000000000000000000000"
OTHER_THREAD = "thr_01JB0000000000000000000001"


def _runs_at(index: int, filter: str = "") -> str:
    return cursors.encode(KEY, "acme", cursors.at("runs", THREAD, filter, index))


def test_a_cursor_names_its_position_for_its_tenant_list_thread_and_filter():
    got = cursors.decode(KEY, "acme", _runs_at(7), list="runs", thread=THREAD)
    assert got == cursors.at("runs", THREAD, "", 7)
    after = cursors.encode(KEY, "acme", cursors.after_thread(1_733_300_000_000, THREAD))
    assert cursors.decode(KEY, "acme", after, list="threads") == cursors.after_thread(1_733_300_000_000, THREAD)


@pytest.mark.parametrize(
    "tenant,key,bound",
    [
        ("other", KEY, {"list": "runs", "thread": THREAD}),  # another tenant's
        ("acme", b"x" * 32, {"list": "runs", "thread": THREAD}),  # another deployment's
        ("acme", KEY, {"list": "messages", "thread": THREAD}),  # another list's
        ("acme", KEY, {"list": "runs", "thread": OTHER_THREAD}),  # another thread's
        ("acme", KEY, {"list": "runs", "thread": THREAD, "filter": "status=pending"}),  # another filter's
        ("acme", KEY, {"list": "threads"}),
    ],
)
def test_a_cursor_used_anywhere_else_is_invalid(tenant, key, bound):
    with pytest.raises(InvalidCursor):
        cursors.decode(key, tenant, _runs_at(7), **bound)


def test_every_single_character_edit_of_a_cursor_is_invalid():
    cursor = _runs_at(7, "run_id=run_01JB0000000000000000000000")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.="
    for i in range(len(cursor)):
        for c in alphabet:
            edited = cursor[:i] + c + cursor[i + 1 :]
            if edited != cursor:
                with pytest.raises(InvalidCursor):
                    cursors.decode(
                        KEY, "acme", edited, list="runs", thread=THREAD, filter="run_id=run_01JB0000000000000000000000"
                    )
    for cut in range(len(cursor)):
        with pytest.raises(InvalidCursor):
            cursors.decode(
                KEY, "acme", cursor[:cut], list="runs", thread=THREAD, filter="run_id=run_01JB0000000000000000000000"
            )


def _signed(payload: bytes) -> str:
    """A cursor with a valid MAC around any payload: what only a holder of the key could make."""
    b64 = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b"=").decode()  # noqa: E731
    return f"{b64(payload)}.{b64(cursors._tag(KEY, 'acme', payload))}"


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"{}",
        b"[]",
        b'[2,"runs","thr_01JB0000000000000000000000","",7,0,""]',  # another version
        b'[1,"runs","thr_01JB0000000000000000000000","",-1,0,""]',
        b'[1,"runs","thr_01JB0000000000000000000000","",2147483648,0,""]',
        b'[1,"runs","thr_01JB0000000000000000000000","",7,0,"",1]',  # a field more
        b'[1,"runs","thr_01JB0000000000000000000000","","7",0,""]',
        b'[1,"threads","","",0,0,"' + b"x" * 65 + b'"]',
    ],
)
def test_a_mac_does_not_make_a_malformed_position_valid(payload):
    with pytest.raises(InvalidCursor):
        cursors.decode(KEY, "acme", _signed(payload), list="runs", thread=THREAD)
    with pytest.raises(InvalidCursor):
        cursors.decode(KEY, "acme", _signed(payload), list="threads")


@given(st.text(max_size=600))
def test_any_text_is_a_cursor_or_invalid_cursor_never_another_error(text):
    with pytest.raises(InvalidCursor):
        cursors.decode(KEY, "acme", text, list="runs", thread=THREAD)


@given(
    st.sampled_from(["runs", "messages", "activity", "requests", "checkpoints", "handoffs"]),
    st.integers(0, cursors.MAX_INDEX),
    st.text(max_size=40),
)
def test_encode_then_decode_is_the_same_position(name, index, filter):
    cursor = cursors.encode(KEY, "acme", cursors.at(name, THREAD, filter, index))
    assert len(cursor) <= cursors.MAX_LENGTH and cursor.isascii()
    assert cursors.decode(KEY, "acme", cursor, list=name, thread=THREAD, filter=filter).index == index
    assert msgspec.json.decode(base64.urlsafe_b64decode(cursor.split(".")[0] + "=="))[4] == index
