"""Helpers of the ACP provider tests: the two real ACP agents (``make setup`` installs them pinned) pointed at
the loopback mocks of their model APIs, as settings objects and as the environment of a stack's workers."""

from __future__ import annotations

import json
from pathlib import Path

from tests.claude.mock_api import MockMessagesApi
from tests.codex.codex_mock import MockResponses
from treadle.providers.acp import AcpAgent, AcpSettings

TENANT = "acpco"  # whose user alice the ACP stack's API clients act as


def agents(claude: MockMessagesApi, codex: MockResponses) -> dict[str, AcpAgent]:
    """``acp-claude`` (Claude Code through claude-agent-acp) and ``acp-codex`` (codex-acp), each on its mock."""
    return {
        "claude": AcpAgent(
            preset="claude-agent-acp",
            model_url=claude.url,
            env={"ANTHROPIC_BASE_URL": claude.url, "ANTHROPIC_API_KEY": "sk-ant-mock"},
        ),
        "codex": AcpAgent(
            preset="codex-acp",
            model_url=codex.base_url,
            env={"OPENAI_API_KEY": "sk-mock"},
        ),
    }


def acp_settings(claude: MockMessagesApi, codex: MockResponses, home_root: Path) -> AcpSettings:
    return AcpSettings(agents=agents(claude, codex), home_root=home_root)


def acp_env(claude: MockMessagesApi, codex: MockResponses, home_root: Path) -> dict[str, str]:
    """The same settings as environment variables, for worker processes."""
    entries = {name: a.model_dump(exclude_unset=True) for name, a in agents(claude, codex).items()}
    return {"TREADLE_ACP_AGENTS": json.dumps(entries), "TREADLE_ACP_HOME_ROOT": str(home_root)}
