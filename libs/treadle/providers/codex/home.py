"""The private ``CODEX_HOME`` a provider host gives its Codex sessions.

One home per tenant on a host: a session that replaces a dead one (host restart, kill -9) must find the
thread's rollout files to resume it, and a native fork must be resumable by the next session. Tenants
never share a home. The config turns off everything that would reach beyond the model provider.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .settings import CodexSettings

PROVIDER_ID = "treadle"


def _toml(value: object) -> str:
    # JSON string and number literals are valid TOML literals for the values written here
    return json.dumps(value)


def render_config(settings: CodexSettings) -> str:
    lines = [
        "# written by Treadle's Codex provider; rewritten when its settings change",
        f"model = {_toml(settings.model)}",
        f"model_provider = {_toml(PROVIDER_ID)}",
        # approval policy and sandbox are passed per thread (config.toml rejects "untrusted")
        'approval_policy = "on-request"',
        'sandbox_mode = "workspace-write"',
        "check_for_update_on_startup = false",
        "hide_agent_reasoning = false",
        # default_mode_request_user_input is marked under development; the warning would reach every turn
        "suppress_unstable_features_warning = true",
    ]
    if settings.reasoning_effort:
        lines.append(f"model_reasoning_effort = {_toml(settings.reasoning_effort)}")
    lines += [
        "",
        f"[model_providers.{PROVIDER_ID}]",
        'name = "Treadle model provider"',
        f"base_url = {_toml(settings.base_url)}",
        'wire_api = "responses"',
        f"env_key = {_toml(settings.api_key_env)}",
        "request_max_retries = 0",
        "stream_max_retries = 0",
        f"stream_idle_timeout_ms = {int(settings.stream_idle_timeout_ms)}",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[features]",
        # each of these reaches github.com or chatgpt.com at startup
        "plugins = false",
        "apps = false",
        "remote_plugin = false",
        # a refused connection must fail the turn, not retry forever
        "unbounded_connection_retries = false",
        # structured questions outside plan mode too
        "default_mode_request_user_input = true",
        "",
        "[tools]",
        "update_plan = { enabled = true }",
        "",
    ]
    return "\n".join(lines)


TMP = Path("/tmp")  # codex refuses a CODEX_HOME under its temporary dir (TMPDIR is /tmp in the sandbox)


def _under_tmp(path: Path) -> bool:
    return path.resolve().is_relative_to(TMP)


def home_root(settings: CodexSettings, beside: Path) -> Path:
    """Where the tenants' homes live: ``TREADLE_CODEX_HOME_ROOT``, else ``beside`` the host's sessions so a later
    session of a tenant finds the rollouts it must resume. When that is under /tmp (a state dir there), under
    the user's cache directory instead, one root per ``beside`` (two stacks never share their homes)."""
    if settings.home_root is not None:
        return settings.home_root
    if not _under_tmp(beside):
        return beside
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(str(beside.resolve()).encode()).hexdigest()[:16]
    return cache / "treadle" / "codex-homes" / digest


def prepare_home(root: Path, tenant: str, settings: CodexSettings) -> Path:
    """Create (or refresh) the tenant's home and return it."""
    home = (root / tenant).resolve()
    if _under_tmp(home):
        raise ValueError(
            f"CODEX_HOME {home} is under /tmp, where codex refuses to install its helper binaries: "
            "set TREADLE_CODEX_HOME_ROOT to a directory outside /tmp"
        )
    home.mkdir(parents=True, exist_ok=True)
    config = home / "config.toml"
    wanted = render_config(settings)
    # Codex appends trusted-project entries to this file; keep them, replace only our part.
    current = config.read_text() if config.exists() else ""
    marker = "\n[projects."
    tail = current[current.index(marker) :] if marker in current else ""
    if current != wanted + tail:
        staging = config.with_suffix(f".{os.getpid()}.tmp")
        staging.write_text(wanted + tail)
        staging.replace(config)
    return home
