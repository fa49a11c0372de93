"""Settings of the Codex provider (``TREADLE_CODEX_*``), read by the provider host process."""

from __future__ import annotations

import shutil
from pathlib import Path

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

# `make` installs the pinned npm package here (Makefile target `tools/codex`)
_PROJECT_TOOLS = Path(__file__).resolve().parents[4] / ".tools" / "codex"
PINNED_VERSION = "0.171.0"


class CodexNotInstalled(Exception):
    pass


class CodexSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TREADLE_CODEX_", extra="ignore")

    binary: Path | None = None  # default: the project's pinned install, else `codex` on PATH
    base_url: str = "https://api.openai.com/v1"  # a Responses API; codex POSTs {base_url}/responses
    model: str = "gpt-5.5"  # a slug the binary knows, so it gets the model's real tool set
    api_key_env: str = "OPENAI_API_KEY"  # the variable codex reads the bearer token from
    api_key: SecretStr | None = None  # given to codex as $api_key_env; default: inherited from the host
    proxy: str | None = None  # egress proxy for everything codex sends beyond loopback
    home_root: Path | None = None  # default: beside the host's sessions, or the user's cache dir (home.home_root)
    request_timeout: float = 30.0  # seconds one JSON-RPC request may take
    start_timeout: float = 30.0  # seconds from spawn to an initialized server
    stream_idle_timeout_ms: int = 300_000
    reasoning_effort: str | None = None

    def resolve_binary(self) -> Path:
        if self.binary is not None:
            if not self.binary.is_file():
                raise CodexNotInstalled(f"TREADLE_CODEX_BINARY={self.binary} is not a file")
            return self.binary
        # The native binary directly: the npm wrapper would only start node to exec it.
        natives = sorted(_PROJECT_TOOLS.glob("node_modules/@openai/codex-linux-*/vendor/*/bin/codex"))
        if natives:
            return natives[0]
        found = shutil.which("codex")
        if found:
            return Path(found)
        raise CodexNotInstalled(
            "codex is not installed: run `make providers` (installs @openai/codex "
            f"{PINNED_VERSION} into .tools/codex) or set TREADLE_CODEX_BINARY"
        )
