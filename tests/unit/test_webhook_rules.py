"""Webhooks without I/O: the signature and its verifier, which events an endpoint takes, the body sent, the
retry schedule, and which addresses may receive (IPv4, IPv6, IPv4 inside IPv6, the operator's allow-list)."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime

import msgspec
import pytest

from treadle.client.webhooks import SignatureError, sign, signature, verify
from treadle.core.envelope import Envelope
from treadle.core.events import RunCompleted, decode_event, encode_event
from treadle.webhooks.addresses import AllowList, UnsafeTarget, check, parse_url, refused_because
from treadle.webhooks.model import Endpoint, backoff, body, delivery_id, matches, schedule

NOW = datetime(2026, 12, 7, tzinfo=UTC)
SECRET = "whsec_0123456789abcdef"


def test_a_signed_body_verifies_and_any_change_is_refused() -> None:
    body_ = b'{"type":"run.completed"}'
    header = sign(SECRET, body_, 1_700_000_000)
    assert header == f"t=1700000000,v1={signature(SECRET, 1_700_000_000, body_)}"
    assert verify(SECRET, header, body_, now=1_700_000_100) == 1_700_000_000
    for secret, got, now in (
        ("another-secret-of-length", body_, 1_700_000_100),  # the wrong secret
        (SECRET, body_ + b" ", 1_700_000_100),  # a changed body
        (SECRET, body_, 1_700_000_301),  # too late: a captured delivery sent again
        (SECRET, body_, 1_699_999_699),  # from the future
    ):
        with pytest.raises(SignatureError):
            verify(secret, header, got, now=now)
    for bad in (None, "", "v1=abc", "t=1700000000", "t=x,v1=ab", f"t=1700000000,v1={'0' * 64}"):
        with pytest.raises(SignatureError):
            verify(SECRET, bad, body_, now=1_700_000_000)


def test_a_header_with_two_signatures_verifies_with_either_secret() -> None:
    body_ = b"{}"
    header = sign(SECRET, body_, 1_700_000_000) + ",v1=" + signature("the-next-secret-123", 1_700_000_000, body_)
    assert verify("the-next-secret-123", header, body_, now=1_700_000_000) == 1_700_000_000


def _endpoint(**kw: object) -> Endpoint:
    fields: dict[str, object] = {
        "id": "whk_1",
        "tenant": "acme",
        "url": "https://example.com/hook",
        "events": ("run.completed",),
        "secret": SECRET,
        "created_at": NOW,
        "updated_at": NOW,
    }
    return Endpoint(**{**fields, **kw})  # type: ignore[arg-type]


def _event(type_: str = "run.completed", tenant: str = "acme", thread: str = "thr_a") -> Envelope:
    return Envelope(
        id="evt_1", type=type_, tenant=tenant, thread=thread, at=NOW, command_id="cmd_1", actor="user:u", data={}
    )


def test_an_endpoint_takes_its_tenants_events_of_its_types_and_threads() -> None:
    plain = _endpoint()
    assert matches(plain, _event())
    assert not matches(plain, _event("run.failed"))
    assert not matches(plain, _event(tenant="globex"))  # never another tenant's, whatever it asks
    assert not matches(_endpoint(enabled=False), _event())
    assert matches(_endpoint(events=("*",)), _event("thread.created"))
    filtered = _endpoint(threads=("thr_b",))
    assert matches(filtered, _event(thread="thr_b")) and not matches(filtered, _event(thread="thr_a"))


def test_the_body_is_the_public_view_with_ids_and_seq() -> None:
    env = Envelope(
        id="evt_9",
        type="run.completed",
        tenant="acme",
        thread="thr_a",
        at=NOW,
        command_id="cmd_1",
        actor="user:u",
        data=RunCompleted(run_id="run_1", attempt_id="att_1"),
    )
    event = decode_event(encode_event(env), seq=42)
    ident = delivery_id("whk_1", event.id)
    assert ident == delivery_id("whk_1", "evt_9") != delivery_id("whk_2", "evt_9")  # stable across redeliveries
    document = msgspec.json.decode(body(event, ident))
    assert document["delivery_id"] == ident and document["event_id"] == "evt_9" and document["seq"] == 42
    assert document["type"] == "run.completed" and document["thread_id"] == "thr_a"
    assert document["data"]["run_id"] == "run_1"


def test_retries_back_off_exponentially_within_the_bound() -> None:
    assert [backoff(n, 1.0, 300.0) for n in (1, 2, 3, 9, 10)] == [1.0, 2.0, 4.0, 256.0, 300.0]
    assert schedule(1.0, 300.0, 3600.0) == [1, 2, 4, 8, 16, 32, 64, 128, 256] + [300] * 10
    assert sum(schedule(1.0, 300.0, 3600.0)) <= 3600
    assert schedule(0.5, 10.0, 2.0) == [0.5, 1.0]
    assert schedule(1.0, 10.0, 0.0) == []  # no retries: the first failure is dead-lettered


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # the cloud metadata service
        "0.0.0.0",
        "224.0.0.1",
        "100.64.0.1",  # carrier-grade NAT
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
    ],
)
def test_no_private_loopback_link_local_multicast_or_unspecified_address(address: str) -> None:
    ip = ipaddress.ip_address(address)
    assert refused_because(ip) is not None
    with pytest.raises(UnsafeTarget):
        check("hooks.example", ip, AllowList())


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "::ffff:93.184.216.34"])
def test_public_addresses_may_receive(address: str) -> None:
    check("example.com", ipaddress.ip_address(address), AllowList())


def test_the_allow_list_opens_named_hosts_and_networks_only() -> None:
    allow = AllowList.parse(["127.0.0.1/32", "hooks.internal", " ", "fd00::/8"])
    check("anything", ipaddress.ip_address("127.0.0.1"), allow)
    check("hooks.internal", ipaddress.ip_address("10.0.0.5"), allow)
    check("x", ipaddress.ip_address("fd00::5"), allow)
    with pytest.raises(UnsafeTarget):
        check("other.internal", ipaddress.ip_address("10.0.0.5"), allow)
    with pytest.raises(UnsafeTarget):
        check("x", ipaddress.ip_address("127.0.0.2"), allow)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "file:///etc/passwd",
        "gopher://example.com",
        "http://user:pw@example.com/",
        "http://user@example.com/",
        "http:///nohost",
        "http://example.com:99999/",
        "http://exa mple.com/",
        "http://example.com/\r\nX-Injected: 1",
        "http://example.com/#frag",
        "https://" + "a" * 3000 + ".com/",
    ],
)
def test_only_plain_http_and_https_urls(url: str) -> None:
    with pytest.raises(UnsafeTarget):
        parse_url(url)


def test_a_url_names_its_target() -> None:
    assert parse_url("https://Example.com/a?b=1").host == "example.com"
    assert parse_url("https://example.com/a?b=1").path == "/a?b=1"
    assert parse_url("http://[::1]:8080").port == 8080 and parse_url("http://[::1]:8080").host == "::1"


def test_a_tenant_over_its_deliveries_per_minute_waits_and_others_do_not() -> None:
    from treadle.deliveries.service import TenantRate

    now = [0.0]
    rate = TenantRate(60, clock=lambda: now[0])  # one a second, 60 at once
    assert [rate.wait_for("acme") for _ in range(60)] == [0.0] * 60
    assert rate.wait_for("acme") == pytest.approx(1.0)  # the 61st waits for a token, it is not dropped
    assert rate.wait_for("globex") == 0.0  # another tenant has its own budget
    now[0] = 1.0
    assert rate.wait_for("acme") == 0.0
