"""Settings of the generic ACP provider (``TREADLE_ACP_*``): agent instances configured by name.

``TREADLE_ACP_AGENTS`` is a JSON object, agent name -> ``AcpAgent``; agent ``claude`` is the provider
``acp-claude``. A preset fills in the command and private home of an agent ``make providers`` (and ``make setup``) installs; anything
the entry sets itself wins. Only the variables the entry names reach the agent: ``env`` (fixed values) and
``env_allow`` (copied from the host's environment when set there).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from ..base import UnknownProvider

PREFIX = "acp-"  # provider names of ACP agents: acp-<agent name>
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
# `make setup` installs the pinned agents here (Makefile target ACP_STAMP)
TOOLS = Path(__file__).resolve().parents[4] / ".tools" / "acp"


class AcpNotConfigured(UnknownProvider):
    """The provider names an ACP agent this host has no settings for (or whose command is missing)."""


class AcpAgent(BaseModel, extra="forbid"):
    preset: str | None = None  # one of PRESETS: its command, home variables and home files
    command: list[str] = []  # argv of the agent (stdio JSON-RPC); empty: the preset's
    env: dict[str, str] = {}  # given to the agent as is ("{home}" is replaced by its private home)
    env_allow: list[str] = []  # host variables passed through when set (an API key, say)
    home_env: list[str] = []  # variables set to the agent's private per-tenant home (CLAUDE_CONFIG_DIR, CODEX_HOME)
    home_files: dict[str, str] = {}  # files written into that home ("{model_url}" is replaced)
    model_url: str | None = None  # the model API the agent calls: its sandbox's only egress
    models: list[str] = []  # model ids a thread may ask for (session/set_model); empty: the agent's default only
    modes: dict[str, str] = {}  # Treadle runtime mode -> the agent's session mode id (session/set_mode)
    mcp_servers: list[dict[str, Any]] = []  # ACP McpServer entries passed at session start where the agent takes them
    # How the orchestrator's MCP server (issue 21) carries the session's credential to an agent that takes http
    # servers: as the Authorization header's value (ACP's shape), or as ``${ORCHESTRATOR_MCP_TOKEN}`` there with
    # the value in the agent's environment, for an agent that puts its servers on a command line (mcp_access.py)
    mcp_token: Literal["header", "env"] = "header"
    # Start a fresh agent process (loading the session) before the turn after a cancelled one: claude-agent-acp
    # 0.23 answers the next prompt with the cancelled query's stale stop reason (its issue #551)
    reload_after_cancel: bool = False
    # Seconds an agent gets to exit once its stdin is closed, before it is killed (codex-acp 0.16 never exits on
    # EOF; its session is on disk already, so a short wait keeps a host's stop quick)
    close_grace: float = 2.0
    start_timeout: float = 60.0  # spawn to an answered initialize
    request_timeout: float = 60.0  # one JSON-RPC request (session/new, session/load, ...)

    def resolved(self) -> AcpAgent:
        """The entry over its preset."""
        if self.preset is None:
            return self
        base = PRESETS.get(self.preset)
        if base is None:
            raise AcpNotConfigured(f"unknown ACP preset {self.preset!r} (known: {', '.join(sorted(PRESETS))})")
        own = self.model_dump(exclude_unset=True, exclude={"preset"})
        merged = base.model_dump() | own
        merged["env"] = base.env | self.env
        merged["home_files"] = base.home_files | self.home_files
        return AcpAgent(**merged)

    def argv(self) -> list[str]:
        if not self.command:
            raise AcpNotConfigured("the ACP agent has no command")
        first = self.command[0]
        found = first if "/" in first else shutil.which(first)
        if found is None or not Path(found).exists():
            raise AcpNotConfigured(f"the ACP agent's command {first!r} is not installed (run `make providers`)")
        return [found, *self.command[1:]]


_CODEX_CONFIG = """# written by Treadle's ACP provider
model = "gpt-5.5"
model_provider = "treadle"
check_for_update_on_startup = false
[model_providers.treadle]
name = "Treadle model provider"
base_url = "{model_url}"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
request_max_retries = 0
stream_max_retries = 0
[analytics]
enabled = false
[feedback]
enabled = false
[features]
plugins = false
apps = false
remote_plugin = false
"""

PRESETS: dict[str, AcpAgent] = {
    # Claude Code through the Claude Agent SDK, as an ACP agent (Zed's adapter; runs on the system's node)
    "claude-agent-acp": AcpAgent(
        command=["node", str(TOOLS / "node_modules/@zed-industries/claude-agent-acp/dist/index.js")],
        home_env=["CLAUDE_CONFIG_DIR"],
        env={
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry, update checks or title calls
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_ENABLE_TASKS": "0",  # the TodoWrite tool (a plan in ACP) rather than Task* tools
        },
        env_allow=["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"],
        modes={"approval_required": "default", "auto_accept_edits": "acceptEdits"},
        reload_after_cancel=True,
        mcp_token="env",  # Claude Code gets its MCP servers as --mcp-config JSON, and expands ${VAR} in headers
    ),
    # Codex as an ACP agent (Zed's native binary); its model provider is written into its private CODEX_HOME
    "codex-acp": AcpAgent(
        command=[str(TOOLS / "node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp")],
        home_env=["CODEX_HOME"],
        home_files={"config.toml": _CODEX_CONFIG},
        env={"RUST_LOG": "warn"},
        env_allow=["OPENAI_API_KEY"],
        modes={"approval_required": "read-only", "auto_accept_edits": "auto", "full_access": "full-access"},
    ),
}


class AcpSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TREADLE_ACP_", extra="ignore")

    agents: dict[str, AcpAgent] = Field(default_factory=dict)
    # Where agents keep their sessions (<root>/<agent>/<tenant>): every host of a volume must see it for a
    # provider thread to resume elsewhere. None: beside the host's session directories.
    home_root: Path | None = None

    def agent(self, provider: str) -> tuple[str, AcpAgent]:
        """The agent named by ``provider`` (``acp-<name>``), resolved over its preset."""
        name = provider.removeprefix(PREFIX)
        if not provider.startswith(PREFIX) or not NAME.fullmatch(name):
            raise AcpNotConfigured(f"{provider!r} is not an ACP provider name (acp-<name>)")
        entry = self.agents.get(name)
        if entry is None:
            known = ", ".join(PREFIX + n for n in sorted(self.agents)) or "none"
            raise AcpNotConfigured(f"ACP agent {name!r} is not configured on this host (configured: {known})")
        return name, entry.resolved()


def configured_providers() -> list[str]:
    """The provider names of the ACP agents configured here (``TREADLE_ACP_AGENTS``), as a caller names them."""
    return [PREFIX + name for name in sorted(AcpSettings().agents) if NAME.fullmatch(name)]
