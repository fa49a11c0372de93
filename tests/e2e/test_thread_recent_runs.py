"""Issue 24: ``GET /v1/threads/{id}?runs=N`` answers the thread with only its last N runs, their messages,
activity and checkpoints (and the checkpoint the first of them started from), every other field whole; read from
the stored parts, it costs the same however long the thread is (the console reads it on each event). A bad
``runs`` is a typed 400; another tenant's thread is not found."""

from __future__ import annotations

import pytest

from tests.support.api import make_api
from tests.support.rollbacks import run_to_end
from tests.support.scripts import script, text, write
from treadle.client import AsyncTreadle
from treadle.client.errors import InvalidRequest, NotFound


async def test_the_last_runs_come_with_their_messages_activity_and_checkpoints(api):
    thread = await api.create_thread(title="recent")
    for n in range(3):
        await run_to_end(api, thread, f"run {n}", script(write(f"f{n}.txt", f"{n}\n"), text(f"reply {n}")))
    whole = await api.thread(thread)
    recent = await api.client.get_thread(thread, runs=2)
    kept = {r["id"] for r in whole["runs"][1:]}
    assert [r["id"] for r in recent["runs"]] == [r["id"] for r in whole["runs"][1:]]
    assert recent["messages"] == [m for m in whole["messages"] if m["run_id"] in kept]
    assert recent["activity"] == [a for a in whole["activity"] if a["run_id"] in kept]
    assert {c["ordinal"] for c in recent["checkpoints"]} == {1, 2, 3}  # 1: where run 2's diff starts
    assert recent["checkpoints"] == [c for c in whole["checkpoints"] if c["ordinal"] >= 1]
    same = {k: v for k, v in whole.items() if k not in ("runs", "messages", "activity", "checkpoints")}
    assert {k: v for k, v in recent.items() if k in same} == same
    assert await api.client.get_thread(thread, runs=1000) == whole


async def test_a_bad_runs_is_a_typed_400_and_another_tenants_thread_is_not_found(api, stack, stack_nc):
    thread = await api.create_thread(title="bounds")
    async with AsyncTreadle(api.client.base_url, api.token) as sdk:
        for bad in (0, 1001, -1):
            with pytest.raises(InvalidRequest) as refused:
                await sdk.get_thread(thread, runs=bad)
            assert refused.value.code == "invalid_parameter" and refused.value.detail["parameter"] == "runs"
        assert (await sdk.get_thread(thread, runs=5)).runs == []
    not_digits = await api.request("GET", f"/v1/threads/{thread}", params={"runs": "5; DROP"})
    assert not_digits.status_code == 400 and not_digits.json()["error"]["code"] == "invalid_parameter"
    other = await make_api(stack, stack_nc, f"other-{thread[-6:]}")
    try:
        async with AsyncTreadle(other.client.base_url, other.token) as theirs:
            with pytest.raises(NotFound):
                await theirs.get_thread(thread, runs=5)
    finally:
        await other.close()
