"""The delivery worker with no endpoint anywhere keeps no consumer (the events of a deployment without webhooks
cost it nothing); the first endpoint takes it up again from that endpoint's creation, so an event appended at
once after the registration is answered still reaches it; deleting the last endpoint stands it down again."""

from __future__ import annotations

import msgspec
import nats
import pytest
from nats.js.errors import NotFoundError

from tests.support.api import Api
from tests.support.helpers import quiet, wait_for
from tests.support.receiver import Receiver
from treadle.cli.stack import Stack
from treadle.eventlog import subjects
from treadle.ops.tokens import TokenStore

pytestmark = pytest.mark.e2e

SETTINGS = {"TREADLE_WEBHOOKS_ALLOW_HOSTS": '["127.0.0.1/32"]'}


async def _webhook_consumers(js) -> list[str]:
    names = []
    for partition in range(64):
        try:
            names.append((await js.consumer_info(subjects.EVENTS_STREAM, f"webhooks-p{partition}")).name)
        except NotFoundError:
            continue
    return names


async def test_no_endpoint_no_consumer_and_the_first_endpoint_gets_what_follows_its_creation(tmp_path) -> None:
    stack = Stack(tmp_path / "stack", env=SETTINGS, on_output=quiet)
    await stack.start(timeout=180)
    nc = await nats.connect(stack.nats_url)
    receiver = await Receiver().start()
    api = Api(stack.api_url, await TokenStore(nc.jetstream()).create("idle", "admin-user", "admin"), "idle")
    try:
        js = nc.jetstream()
        await api.create_thread(title="before any endpoint")
        assert await _webhook_consumers(js) == []

        for round_ in range(2):
            r = await api.request("POST", "/v1/webhooks", json={"url": receiver.url(), "events": ["thread.created"]})
            assert r.status_code == 201, r.text
            hook = r.json()["webhook"]["id"]
            thread = await api.create_thread(title=f"right after the endpoint {round_}")
            got = await receiver.wait(round_ + 1)
            assert msgspec.json.decode(got[-1].body)["thread_id"] == thread
            assert (await api.request("DELETE", f"/v1/webhooks/{hook}")).status_code == 200

            async def stood_down() -> bool:
                return await _webhook_consumers(js) == []

            await wait_for(stood_down, timeout=20, interval=0.2, what="the webhook consumers gone")
    finally:
        await receiver.stop()
        await api.close()
        await nc.close()
        await stack.stop()
