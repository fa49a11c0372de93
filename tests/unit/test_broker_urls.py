"""A broker URL may list a cluster's nodes; its credentials become connect options (see ops/broker_urls.py)."""

from __future__ import annotations

import pytest

from treadle.runtime import broker_urls


def test_broker_urls_split_a_cluster_url_into_servers_and_one_set_of_credentials():
    parsed = broker_urls.parse("nats://treadle:p%40ss@127.0.0.1:4001, nats://treadle:p%40ss@127.0.0.1:4002")
    assert parsed.servers == ["nats://127.0.0.1:4001", "nats://127.0.0.1:4002"]
    assert (parsed.user, parsed.password) == ("treadle", "p@ss")
    assert parsed.address == "nats://127.0.0.1:4001,nats://127.0.0.1:4002"
    assert broker_urls.parse("127.0.0.1:4222").connect_options() == {"servers": ["nats://127.0.0.1:4222"]}
    with pytest.raises(ValueError):
        broker_urls.parse("nats://a:1@h:1,nats://b:2@h:2")
    with pytest.raises(ValueError):
        broker_urls.parse(" , ")
