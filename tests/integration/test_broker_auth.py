"""Issue 9, item 2: the broker Treadle starts refuses anonymous clients; the service user survives restarts;
a tenant credential's permissions are exactly the read-only set."""

from __future__ import annotations

import nats
import pytest

from treadle.runtime.broker_auth import tenant_permissions
from treadle.runtime.servers import NatsServer


async def _refused(url: str, **kw) -> str:
    with pytest.raises(nats.errors.Error) as caught:
        await nats.connect(url, allow_reconnect=False, connect_timeout=2, **kw)
    return str(caught.value)


async def test_no_anonymous_or_wrong_password_client_connects_and_the_service_user_survives_a_restart(tmp_path):
    server = NatsServer(tmp_path / "nats")
    async with server:
        assert "Authorization Violation" in await _refused(server.address)
        assert "Authorization Violation" in await _refused(server.address, user="treadle", password="guess")
        url = server.url
        nc = await nats.connect(url)
        await nc.close()
        await server.stop()
        await server.start()
        assert server.url == url  # the same service password after a restart (the chaos tests rely on it)
        nc = await nats.connect(url)
        await nc.close()
    assert server.auth.service().password not in (tmp_path / "nats" / "auth.conf").read_text()  # a hash only


def test_a_tenant_credential_may_only_read_its_tenant_and_use_its_own_consumer():
    permissions = tenant_permissions("acme", "tc_1")
    assert permissions["subscribe"]["allow"] == ["treadle.evt.acme.>", "_INBOX_tc_1.>"]
    assert permissions["publish"]["allow"] == [
        "$JS.API.CONSUMER.CREATE.TREADLE_EVENTS.tc_1.treadle.evt.acme.>",
        "$JS.API.CONSUMER.INFO.TREADLE_EVENTS.tc_1", "$JS.API.CONSUMER.DELETE.TREADLE_EVENTS.tc_1",
        "$JS.API.CONSUMER.MSG.NEXT.TREADLE_EVENTS.tc_1", "$JS.ACK.TREADLE_EVENTS.tc_1.>"]
