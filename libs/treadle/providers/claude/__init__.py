"""Claude Code through ``claude-agent-sdk``: one long-lived ``ClaudeSDKClient`` (one CLI process) per provider
session; the durable native ref of a provider thread is Claude Code's session id."""

from .adapter import CAPABILITIES, ClaudeAdapter

__all__ = ["CAPABILITIES", "ClaudeAdapter"]
