"""Issue 17: a body under the HTTP limit whose field is over its own limit is a typed 400 at once, checked before
anything is sent on the broker (it was a 503 with Retry-After for ever); a command at every limit goes through."""

from __future__ import annotations

import pytest

from tests.support.scripts import approval, script
from treadle.core import limits as lim

pytestmark = pytest.mark.e2e

HTTP_LIMIT = 1024 * 1024
WORST = "\x01"  # six bytes of JSON each


def script_of(size: int) -> dict:
    import msgspec

    empty = len(msgspec.json.encode({"steps": [{"type": "text", "text": "", "chunk": 4096}]}))
    return {"steps": [{"type": "text", "text": "s" * (size - empty), "chunk": 4096}]}


def _refused(r, code: str) -> None:
    assert r.status_code == 400 and r.json()["error"]["code"] == code, (r.status_code, r.text[:300])
    assert "retry-after" not in r.headers


async def test_L2_1_a_body_just_under_the_http_limit_is_refused_by_its_field_limit_not_the_broker(api):
    thread = await api.create_thread()
    text_body = b'{"text": "' + b"A" * 1_048_376 + b'"}'
    title_body = b'{"title": "' + b"A" * 1_048_376 + b'"}'
    assert len(text_body) <= HTTP_LIMIT and len(title_body) <= HTTP_LIMIT
    headers = {"Content-Type": "application/json"}
    _refused(
        await api.request("POST", f"/v1/threads/{thread}/messages", content=text_body, headers=headers), "text_too_long"
    )
    _refused(await api.request("POST", "/v1/threads", content=title_body, headers=headers), "invalid_title")
    assert (await api.thread(thread))["runs"] == []


async def test_L3_6_every_write_route_refuses_each_field_over_its_limit_and_changes_nothing(api):
    thread = await api.create_thread()
    first = await api.send(thread, "busy", script=script(approval("wait?")))
    request = await api.wait_request(thread)
    queued = await api.send(thread, "later", mode="queue_after_active")
    before = await api.thread(thread)
    over_text, over_title = "x" * (lim.MAX_TEXT_CHARS + 1), "t" * (lim.MAX_TITLE_CHARS + 1)
    over_id, too_many_answers = "r" * (lim.MAX_NAME_CHARS + 1), {str(i): "a" for i in range(lim.MAX_ANSWERS + 1)}
    cases = [
        ("POST", "/v1/threads", {"title": over_title}, "invalid_title"),
        ("POST", "/v1/threads", {"model": "m" * (lim.MAX_MODEL_CHARS + 1)}, "invalid_model"),
        ("POST", "/v1/threads", {"provider": "p" * (HTTP_LIMIT // 2)}, "invalid_provider"),
        ("POST", "/v1/threads", {"workspace": "w" * (lim.MAX_WORKSPACE_CHARS + 1)}, "invalid_workspace"),
        ("POST", f"/v1/threads/{thread}/messages", {"text": over_text}, "text_too_long"),
        ("POST", f"/v1/threads/{thread}/messages", {"text": "x", "model": "m" * 900_000}, "invalid_model"),
        ("POST", f"/v1/threads/{thread}/messages", {"text": "x", "mode": "m" * 900_000}, "invalid_mode"),
        (
            "POST",
            f"/v1/threads/{thread}/messages",
            {"text": "x", "script": script_of(lim.MAX_SCRIPT_BYTES + 1)},
            "script_too_large",
        ),
        ("PATCH", f"/v1/threads/{thread}/queue/{queued['run_id']}", {"text": over_text}, "text_too_long"),
        (
            "PATCH",
            f"/v1/threads/{thread}/queue/{queued['run_id']}",
            {"text": "x", "script": script_of(lim.MAX_SCRIPT_BYTES + 1)},
            "script_too_large",
        ),
        (
            "PATCH",
            f"/v1/threads/{thread}/queue",
            {"order": [queued["run_id"]] * (lim.MAX_QUEUE_ORDER + 1)},
            "invalid_order",
        ),
        (
            "POST",
            f"/v1/requests/{request['id']}/respond",
            {"decision": "accept", "message": "m" * 900_000},
            "invalid_response",
        ),
        (
            "POST",
            f"/v1/threads/{thread}/fork",
            {"source": {"type": "run", "id": first["run_id"]}, "title": over_title},
            "invalid_title",
        ),
        # the choices and the nested and listed fields (treadle.api: Literals, constraints of items)
        ("POST", "/v1/threads", {"runtime_mode": "yolo"}, "invalid_runtime_mode"),
        ("POST", f"/v1/threads/{thread}/messages", {"text": "x", "target_run_id": over_id}, "invalid_id"),
        ("PATCH", f"/v1/threads/{thread}/queue", {"order": [over_id]}, "invalid_id"),
        ("POST", f"/v1/requests/{request['id']}/respond", {"decision": "maybe"}, "invalid_response"),
        ("POST", f"/v1/requests/{request['id']}/respond", {"answers": too_many_answers}, "invalid_response"),
        ("POST", f"/v1/threads/{thread}/fork", {"source": {"type": "run", "id": over_id}}, "invalid_id"),
        (
            "POST",
            f"/v1/threads/{thread}/fork",
            {"source": {"type": "provider_thread", "id": "pth_x", "turn": "t" * (lim.MAX_TURN_REF_CHARS + 1)}},
            "invalid_id",
        ),
    ]
    for method, path, body, code in cases:
        r = await api.request(method, path, json=body)
        _refused(r, code)
        assert len(r.content) < 2000  # the refusal names the field and its limit, never the value
    after = await api.thread(thread)
    assert after["seq"] == before["seq"] and [r["status"] for r in after["requests"]] == ["pending"]


async def test_L2_1_a_message_at_every_limit_is_accepted_and_its_run_completes(api):
    thread = await api.create_thread(title="t" * lim.MAX_TITLE_CHARS)
    text = WORST * (lim.MAX_TEXT_CHARS - 1) + "x"
    sent = await api.send(thread, text, model="m" * lim.MAX_MODEL_CHARS, script=script_of(lim.MAX_SCRIPT_BYTES))
    run = await api.wait_run(sent["run_id"], timeout=60)
    assert run["messages"][0]["text"] == text and run["status"] == "completed"
