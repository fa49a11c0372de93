"""Settings of the Claude Code provider (``TREADLE_CLAUDE_*``), read by the provider host process."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from claude_agent_sdk import PermissionMode

# Treadle's runtime modes (Thread.runtime_mode) as Claude Code permission modes.
PERMISSION_MODES: dict[str, PermissionMode] = {
    "approval_required": "default",
    "auto_accept_edits": "acceptEdits",
    "full_access": "bypassPermissions",
}


class ClaudeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TREADLE_CLAUDE_", extra="ignore")

    base_url: str | None = None  # the Messages API (ANTHROPIC_BASE_URL); None: Claude Code's default
    api_key: SecretStr | None = None  # ANTHROPIC_API_KEY for the CLI
    model: str | None = None  # used when the thread names no model
    cli_path: Path | None = None  # None: the CLI bundled with claude-agent-sdk
    # Where Claude Code keeps conversations (<dir>/<tenant>/projects/…). Every host serving a workspace
    # volume must see the same directory, or a provider thread cannot resume on another host (L9.3).
    # None: <TREADLE_STATE_DIR>/provider-runtimes/claude-threads, i.e. two levels above a session's state dir.
    threads_dir: Path | None = None
    connect_timeout: float = 60.0  # spawning the CLI and its initialize handshake
    close_timeout: float = 15.0  # a clean disconnect before the process is abandoned
    max_retries: int | None = None  # CLAUDE_CODE_MAX_RETRIES: the CLI's own retries of a failed API call
    inline_tools: bool = True  # ENABLE_TOOL_SEARCH=false: every tool in the request, none deferred
    todo_list: bool = True  # the TodoWrite tool (mapped to the run's todo list) instead of Task* tools
