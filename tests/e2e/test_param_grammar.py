"""Issue 17: ids, sequence numbers and numeric parameters are parsed to their exact grammar before use; anything
else is a typed 400 (``Last-Event-ID: ²`` passed ``isdigit()`` and was a 500; 2^64 opened a stream that then
aborted)."""

from __future__ import annotations

import pytest

from tests.support.scripts import script, text

pytestmark = pytest.mark.e2e

# Digits Python's int() or Litestar's int parsing would take, and numbers out of range.
NOT_A_SEQ = [
    "²",
    "٣",
    "１",
    "+5",
    "-1",
    "-0",
    "1_0",
    " 5",
    "5 ",
    "1e3",
    "0x10",
    "",
    "5.0",
    "9" * 19 + "0",
    str(2**64),
    str(2**63),
    "18446744073709551616",
]


def _bad(r, code: str) -> None:
    assert r.status_code == 400, (r.request.url, r.request.headers.get("last-event-id"), r.status_code, r.text[:200])
    assert r.json()["error"]["code"] == code and "Traceback" not in r.text


async def test_L9_1_last_event_id_and_after_must_be_ascii_stream_sequences(api):
    thread = await api.create_thread()
    for value in NOT_A_SEQ:
        if value.strip() == value:  # HTTP strips the whitespace around a header's value
            _bad(
                await api.request("GET", f"/v1/threads/{thread}/events", headers={"Last-Event-ID": value.encode()}),
                "invalid_last_event_id",
            )
        _bad(await api.request("GET", f"/v1/threads/{thread}/events", params={"after": value}), "invalid_parameter")


async def test_L9_1_every_numeric_query_parameter_is_checked_to_its_grammar_and_range(api):
    thread = await api.create_thread()
    sent = await api.send(thread, "x", script=script(text("ok")))
    await api.wait_run(sent["run_id"])
    lists = [
        f"/v1/threads/{thread}/{name}"
        for name in ("runs", "messages", "activity", "requests", "checkpoints", "handoffs")
    ]
    routes = {
        "min_seq": [
            f"/v1/threads/{thread}",
            f"/v1/runs/{sent['run_id']}",
            f"/v1/threads/{thread}/queue",
            f"/v1/threads/{thread}/lineage",
            f"/v1/runs/{sent['run_id']}/diff",
            f"/v1/threads/{thread}/diff",
            *lists,
        ],
        "max_bytes": [f"/v1/runs/{sent['run_id']}/diff", f"/v1/threads/{thread}/diff"],
        "from": [f"/v1/threads/{thread}/diff"],
        "to": [f"/v1/threads/{thread}/diff"],
        "limit": ["/v1/threads", *lists],
    }
    for name, paths in routes.items():
        for path in paths:
            for value in NOT_A_SEQ:
                _bad(await api.request("GET", path, params={name: value}), "invalid_parameter")
    for value in NOT_A_SEQ:  # the header that stands for min_seq
        if value.strip() == value:
            _bad(await api.request("GET", lists[0], headers={"X-Treadle-Min-Seq": value.encode()}), "invalid_parameter")
    for path in ("/v1/threads", *lists):
        for value in ("0", "201"):
            _bad(await api.request("GET", path, params={"limit": value}), "invalid_parameter")
        assert (await api.request("GET", path, params={"limit": "200"})).status_code == 200
    for name, value in (("max_bytes", "0"), ("max_bytes", str(4 * 1024 * 1024 + 1))):
        _bad(await api.request("GET", f"/v1/threads/{thread}/diff", params={name: value}), "invalid_parameter")
    assert (await api.request("GET", f"/v1/threads/{thread}", params={"min_seq": "0"})).status_code == 200


async def test_L9_1_ids_must_have_their_exact_shape(api):
    """``<prefix>_`` then 26 Crockford base32 characters; the right shape that names nothing is a 404."""
    for bad in (
        "thr_" + "0" * 25,
        "thr_" + "0" * 27,
        "thr_" + "O" * 26,
        "thr_" + "i" * 26,
        "thr_" + "0" * 25 + "-",
        "run_" + "0" * 26,
        "THR_" + "0" * 26,
    ):
        _bad(await api.request("GET", f"/v1/threads/{bad}"), "invalid_id")
    assert (await api.request("GET", "/v1/threads/thr_" + "0" * 26)).status_code == 404
