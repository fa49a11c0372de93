"""Issue 21: the provider host's MCP URL becomes an egress target of every runtime given a credential, so a URL
no sandbox could reach (or no URL at all) stops the host at its start with the reason, before it connects to
anything, instead of failing each session's first tool call."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from treadle.ops.servers import free_port


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://10.0.0.7:8080/mcp", "plain http only on the loopback"),
        ("gateway:8080/mcp", "scheme must be http or https"),
    ],
)
def test_a_provider_host_given_an_unreachable_mcp_url_stops_and_says_why(tmp_path, url, why):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")},
        "TREADLE_NATS_URL": f"nats://127.0.0.1:{free_port()}",  # never dialled: the settings stop it first
        "TREADLE_STATE_DIR": str(tmp_path),
        "TREADLE_PROVIDER_HOST_MCP_URL": url,
    }
    done = subprocess.run(
        [sys.executable, "-m", "treadle.provider_host"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "TREADLE_PROVIDER_HOST_MCP_URL" in done.stderr and why in done.stderr, done.stderr[-2000:]
