"""Egress targets from model API URLs, and the CONNECT request heads the host side accepts."""

import pytest
from pydantic import ValidationError

from treadle.runtime.settings import ProviderHostSettings
from treadle.sandbox.egress import (
    EgressRequestError,
    EgressTargetError,
    Routes,
    egress_targets,
    parse_connect,
    routes,
    sandbox_reachable_url,
)


def test_targets_take_the_default_port_of_their_scheme():
    assert egress_targets(["https://api.openai.com/v1", "http://models.internal/v1"]) == {
        ("api.openai.com", 443),
        ("models.internal", 80),
    }


def test_targets_keep_explicit_ports_lowercase_names_and_collapse_duplicates():
    urls = [
        "https://API.Anthropic.com:8443",
        "https://api.anthropic.com:8443/v1/messages",
        "http://127.0.0.1:8123/v1",
        "http://[::1]:9000/",
    ]
    assert egress_targets(urls) == {("api.anthropic.com", 8443), ("127.0.0.1", 8123), ("::1", 9000)}


def test_no_urls_allow_nothing():
    assert egress_targets([]) == frozenset()


@pytest.mark.parametrize(
    "url", ["ftp://example.com/", "ws://example.com/", "file:///etc/passwd", "api.openai.com", "unix:///run/x.sock", ""]
)
def test_anything_but_http_and_https_is_rejected_with_a_clear_message(url):
    with pytest.raises(ValueError, match="scheme must be http or https") as raised:
        egress_targets([url])
    assert isinstance(raised.value, EgressTargetError) and repr(url) in str(raised.value)


@pytest.mark.parametrize("url", ["https://", "https:///v1", "https://:443/", "http://exa mple.com/", "https://a_b-/x"])
def test_urls_without_a_valid_host_are_rejected(url):
    with pytest.raises(EgressTargetError, match="no valid host"):
        egress_targets([url])


@pytest.mark.parametrize("url", ["https://example.com:99999/", "https://example.com:http/", "https://example.com:0/"])
def test_urls_with_a_bad_port_are_rejected(url):
    with pytest.raises(EgressTargetError, match="bad port"):
        egress_targets([url])


def test_a_connect_head_names_its_target_lowercased():
    assert parse_connect(b"CONNECT API.OpenAI.com:443 HTTP/1.1\r\nHost: x\r\n\r\n") == ("api.openai.com", 443)
    assert parse_connect(b"CONNECT [::1]:8080 HTTP/1.0\r\n\r\n") == ("::1", 8080)


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET http://example.com/ HTTP/1.1\r\n\r\n", 405),
        (b"connect example.com:443 HTTP/1.1\r\n\r\n", 405),
        (b"CONNECT example.com HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT example.com:0 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT example.com:70000 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT example.com:443 HTTP/2\r\n\r\n", 400),
        (b"CONNECT  example.com:443 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT ex\xc3\xa4mple.com:443 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT user@example.com:443 HTTP/1.1\r\n\r\n", 400),
        (b"\r\n\r\n", 400),
    ],
)
def test_malformed_connect_heads_are_refused_with_a_status(head, status):
    with pytest.raises(EgressRequestError) as refused:
        parse_connect(head)
    assert refused.value.status == status


# --- issue 21: the orchestrator's MCP URL, a runtime's one egress target besides its model API ---------------

MCP_SETTING = "TREADLE_PROVIDER_HOST_MCP_URL"


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/mcp", "http://localhost:8000/mcp", "https://gateway.example.com/mcp"]
)
def test_an_mcp_url_a_sandbox_can_reach_is_kept(url):
    assert sandbox_reachable_url(url, MCP_SETTING) == url
    assert ProviderHostSettings(mcp_url=url).mcp_url == url


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://10.0.0.7:8080/mcp", "plain http only on the loopback"),  # the forwarder's proxy carries https only
        ("http://gateway.example.com/mcp", "plain http only on the loopback"),
        ("http://[::1]:8000/mcp", "listens on 127.0.0.1"),
        ("http://127.0.0.1/mcp", "cannot listen on loopback port 80"),  # the runtime would not even start
        ("https://localhost:443/mcp", "cannot listen on loopback port 443"),
        ("http://svc:hunter2@127.0.0.1:8000/mcp", "no credentials in the URL"),
        ("ftp://127.0.0.1/mcp", "scheme must be http or https"),
        ("127.0.0.1:8000/mcp", "scheme must be http or https"),
        ("http://127.0.0.1:99999/mcp", "bad port"),
        ("http://exa mple/mcp", "no valid host"),
        ("http://" + "a" * 100_000 + "/mcp", "longer than 2048 characters"),  # and not repeated in the message
    ],
)
def test_an_mcp_url_no_sandbox_could_reach_stops_the_provider_host_with_the_reason(url, why):
    with pytest.raises(EgressTargetError, match=why):
        sandbox_reachable_url(url, MCP_SETTING)
    with pytest.raises(ValidationError, match=MCP_SETTING) as refused:
        ProviderHostSettings(mcp_url=url)
    assert why in str(refused.value) and "hunter2" not in str(refused.value).split("input_value")[0]


def test_the_mcp_url_adds_its_host_and_port_and_nothing_else():
    model = "http://127.0.0.1:8123/v1"
    assert routes([model]) == Routes(frozenset({("127.0.0.1", 8123)}), ((8123, "127.0.0.1", 8123),), False)
    local = routes([model, "http://127.0.0.1:8700/mcp"])  # the gateway on the loopback: a listener of its own
    assert local.allowed == {("127.0.0.1", 8123), ("127.0.0.1", 8700)} and not local.proxied
    assert local.ports == ((8123, "127.0.0.1", 8123), (8700, "127.0.0.1", 8700))
    remote = routes(["https://api.openai.com/v1", "https://gateway.example.com/mcp"])  # both over the proxy
    assert remote == Routes(frozenset({("api.openai.com", 443), ("gateway.example.com", 443)}), (), True)
    same = routes([model, "http://127.0.0.1:8123/mcp"])  # one server for both: one target, one listener
    assert same.allowed == {("127.0.0.1", 8123)} and same.ports == ((8123, "127.0.0.1", 8123),)
