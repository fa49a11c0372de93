"""Codex through ``codex app-server`` (JSON-RPC over stdio)."""

from .adapter import CAPABILITIES, RUNTIME_MODES, CodexAdapter, ResumeFailed
from .settings import CodexNotInstalled, CodexSettings

__all__ = ["CAPABILITIES", "RUNTIME_MODES", "CodexAdapter", "CodexNotInstalled", "CodexSettings", "ResumeFailed"]
