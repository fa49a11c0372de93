"""Issue 21: the provider host's MCP URL becomes an egress target of every runtime given a credential, so a URL
no sandbox could reach (or no URL at all) stops the host at its start with the reason, before it connects to
anything, instead of failing each session's first tool call."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from treadle.ops.servers import free_port

ACP_AGENT = '{"plain": {"command": ["/bin/true"], "model_url": "http://127.0.0.1:80/v1"}}'


@pytest.mark.parametrize(
    ("setting", "url", "why"),
    [
        ("TREADLE_PROVIDER_HOST_MCP_URL", "http://10.0.0.7:8080/mcp", "plain http only on the loopback"),
        ("TREADLE_PROVIDER_HOST_MCP_URL", "gateway:8080/mcp", "scheme must be http or https"),
        # The model APIs the runtimes call are egress targets too, checked the same way.
        ("TREADLE_CODEX_BASE_URL", "http://models.example:8080/v1", "plain http only on the loopback"),
        ("TREADLE_CLAUDE_BASE_URL", "http://[::1]:8080", "listens on 127.0.0.1"),
        ("TREADLE_CLAUDE_BASE_URL", "https://user:hunter2@api.example", "no credentials in the URL"),
        ("TREADLE_ACP_AGENTS", ACP_AGENT, "below 1024"),
    ],
)
def test_a_provider_host_given_an_unreachable_url_stops_and_says_why(tmp_path, setting, url, why):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")},
        "TREADLE_NATS_URL": f"nats://127.0.0.1:{free_port()}",  # never dialled: the settings stop it first
        "TREADLE_STATE_DIR": str(tmp_path),
        setting: url,
    }
    done = subprocess.run(
        [sys.executable, "-m", "treadle.provider_host"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    named = setting if setting != "TREADLE_ACP_AGENTS" else "TREADLE_ACP_AGENTS plain: model_url"
    assert named in done.stderr and why in done.stderr, done.stderr[-2000:]
    assert "hunter2" not in done.stderr
