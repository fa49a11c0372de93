"""The CLI's environment and options for one provider session: offline-safe and isolated."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path

from claude_agent_sdk import ClaudeAgentOptions
from claude_agent_sdk.types import CanUseTool, CanUseToolShadowedWarning

from ..mcp_access import McpAccess, claude_allowed_tools, claude_servers, runtime_env
from .settings import PERMISSION_MODES, ClaudeSettings

# In full access the permission callback is shadowed for tool calls, and that is intended: it stays set
# because Claude Code offers AskUserQuestion (and the plan tools) only to a client that has one.
warnings.filterwarnings("ignore", category=CanUseToolShadowedWarning)


def cli_env(settings: ClaudeSettings, config_dir: Path, runtime_mode: str) -> dict[str, str]:
    env = {
        "CLAUDE_CONFIG_DIR": str(config_dir),
        # The agent's shell sources $HOME's profile: not the host user's (their dotfiles, tool shims and
        # locks belong to the machine, not to a tenant's session).
        "HOME": str(config_dir.parent / "home"),
        # Without this the CLI resolves api.anthropic.com, pings /api/hello and asks the model for titles.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        # Every Bash command starts in the workspace, so an approval's cwd is where the command really runs.
        "CLAUDE_BASH_MAINTAIN_PROJECT_WORKING_DIR": "1",
    }
    if settings.base_url:
        env["ANTHROPIC_BASE_URL"] = settings.base_url
    if settings.api_key:
        env["ANTHROPIC_API_KEY"] = settings.api_key.get_secret_value()
    if settings.max_retries is not None:
        env["CLAUDE_CODE_MAX_RETRIES"] = str(settings.max_retries)
    if settings.inline_tools:
        env["ENABLE_TOOL_SEARCH"] = "false"
    if settings.todo_list:
        env["CLAUDE_CODE_ENABLE_TODO_TOOLS"] = "1"
        env["CLAUDE_CODE_ENABLE_TASKS"] = "0"  # the legacy TodoWrite list, not the Task* tools
    if runtime_mode == "full_access" and hasattr(os, "geteuid") and os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # the CLI refuses to skip permissions as root unless told it is sandboxed
    return env


# What claude-agent-sdk sets per spawn and the CLI needs; a sandbox's launcher takes these (and only these)
# from the environment the SDK gives its wrapper script.
SDK_SPAWN_ENV = (
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_AGENT_SDK_VERSION",
    "CLAUDE_CODE_SDK_READS_SESSION_STATE",
    "CLAUDE_CODE_ENABLE_SDK_FILE_CHECKPOINTING",
    "CLAUDE_AGENT_SDK_CLIENT_APP",
    "CLAUDE_AGENT_SDK_DERIVED_CLIENT_APP",
)


def real_cli(settings: ClaudeSettings) -> Path:
    """The CLI itself: the configured one, else the binary bundled with claude-agent-sdk."""
    if settings.cli_path:
        return Path(settings.cli_path)
    import claude_agent_sdk

    return Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"


def session_options(
    settings: ClaudeSettings,
    *,
    workspace: Path,
    config_dir: Path,
    runtime_mode: str,
    model: str | None,
    can_use_tool: CanUseTool,
    stderr: Callable[[str], None],
    session_id: str | None = None,
    resume: str | None = None,
    fork: bool = False,
    resume_at: str | None = None,
    cli_path: Path | None = None,
    mcp: McpAccess | None = None,
) -> ClaudeAgentOptions:
    """``cli_path``: what to spawn instead of the CLI (a sandbox's wrapper script)."""
    if runtime_mode not in PERMISSION_MODES:
        raise ValueError(f"runtime mode {runtime_mode!r} is not one of {sorted(PERMISSION_MODES)}")
    return ClaudeAgentOptions(
        cwd=str(workspace),
        env={**cli_env(settings, config_dir, runtime_mode), **runtime_env(mcp)},
        mcp_servers=claude_servers(mcp),  # type: ignore[arg-type]  # the SDK's TypedDict of an http server
        allowed_tools=claude_allowed_tools(mcp),
        cli_path=str(cli_path) if cli_path else str(settings.cli_path) if settings.cli_path else None,
        model=model or settings.model,
        permission_mode=PERMISSION_MODES[runtime_mode],
        can_use_tool=can_use_tool,
        include_partial_messages=True,
        forward_subagent_text=True,  # a subagent's text streams under its own node
        stderr=stderr,
        session_id=session_id,
        resume=resume,
        fork_session=fork,
        resume_session_at=resume_at,
    )
